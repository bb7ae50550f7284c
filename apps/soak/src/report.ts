/** The report as text tables (the JSON is `Report` itself). */
import type { Report } from './checker.js';

function table(header: string[], rows: (string | number)[][]): string {
  const cells = rows.map((r) => r.map(String));
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  return [line(header), rule, ...cells.map(line)].join('\n');
}

const ms = (v: number | null) => (v === null ? '-' : `${(v / 1000).toFixed(2)} s`);

/** The whole report as text. */
export function formatReport(r: Report): string {
  const out: string[] = [];
  const c = r.config;
  out.push(
    `cyclone soak: seed ${r.seed}, ${c.workers} workers × ${c.concurrency}, lease ${c.leaseMs} ms, ` +
      `faults ${c.faults.join(',') || 'none'}; fault phase ${ms(r.durations.faultPhaseMs)}, ` +
      `settle ${ms(r.durations.settleMs)}`,
  );
  out.push('');
  out.push(
    table(
      ['RUNS', 'COUNT'],
      [
        ['submitted (confirmed)', r.runs.submitted],
        ['completed', r.runs.completed],
        ['failed by design (declined card)', r.runs.failedByDesign],
        ['failed unexpectedly', r.runs.failedUnexpectedly],
        ['cancelled', r.runs.cancelled],
        ['stuck (non-terminal after settle)', r.runs.stuck],
        ['lost', r.runs.lost],
        ['submissions retried (database down)', r.runs.submitRetries],
      ],
    ),
  );
  out.push('');
  out.push(
    table(
      ['STEPS AND EFFECTS', 'VALUE'],
      [
        ['steps (completed / total)', `${r.steps.completed} / ${r.steps.total}`],
        ['attempts (max on one step)', `${r.steps.attempts} (${r.steps.maxAttempt})`],
        ['completionTx rows (violations)', `${r.business.rows} (${r.business.violations})`],
        [
          'provider effects (keys with >1)',
          `${r.effects.totalEffects} (${r.effects.duplicateKeys})`,
        ],
        ...Object.entries(r.effects.byProvider).map(([p, v]) => [
          `  ${p}: effects / requests`,
          `${v.effects} / ${v.requests}`,
        ]),
        ['completed provider nodes without exactly 1 effect', r.effects.completedWithoutExactlyOne],
      ],
    ),
  );
  out.push('');
  const f = r.faults;
  out.push(
    table(
      ['FAULTS INJECTED', 'COUNT'],
      [
        ['worker SIGKILL (and restart)', f.kills],
        [
          'pg_terminate_backend (events / backends)',
          `${f.byKind.terminate ?? 0} / ${f.terminatedBackends}`,
        ],
        [
          'PostgreSQL restart (fast / immediate, max down)',
          `${f.pgRestarts.fast} / ${f.pgRestarts.immediate}, ${ms(f.pgRestarts.maxDownMs)}`,
        ],
        ['worker event loop blocked past its lease', f.stalls],
        ...pgbouncerRows(r),
        ...failoverRows(r),
        ...partitionRows(r),
        ...Object.entries(f.provider)
          .sort()
          .map(([k, v]) => [`provider ${k} (queued / hit)`, `${v.injected} / ${v.hits}`]),
      ],
    ),
  );
  out.push('');
  const k = r.recovery.afterKill;
  const s = r.recovery.afterStall;
  out.push(
    table(
      ['RECOVERY', 'ORPHANED STEPS', 'RAN AGAIN', 'FINISHED BY IT', 'NEVER', 'P50', 'P95', 'MAX'],
      [
        [
          'after a kill',
          k.orphans,
          k.count,
          k.committedByDeadWorker,
          k.neverRerun,
          ms(k.p50),
          ms(k.p95),
          ms(k.max),
        ],
        [
          'after a stall',
          s.orphans,
          s.count,
          s.completedByStalledWorker,
          s.neverRerun,
          ms(s.p50),
          ms(s.p95),
          ms(s.max),
        ],
      ],
    ),
  );
  out.push('');
  out.push(
    table(
      ['UNKNOWN OUTCOMES: HOW EACH ENDED', 'COUNT'],
      [
        ...Object.entries(r.unknownOutcomes.byEnding).sort((a, b) => b[1] - a[1]),
        [
          'total (stripe/sendgrid/twilio)',
          `${r.unknownOutcomes.total} (${['stripe', 'sendgrid', 'twilio'].map((p) => r.unknownOutcomes.byProvider[p] ?? 0).join('/')})`,
        ],
      ],
    ),
  );
  out.push('');
  out.push(
    table(
      ['INVARIANT', 'RESULT', 'VALUE'],
      r.invariants.map((i) => [i.name, i.ok ? 'ok' : 'FAILED', i.value]),
    ),
  );
  for (const i of r.invariants.filter((x) => !x.ok)) {
    out.push('');
    out.push(`${i.name}: first violations`);
    for (const v of i.violations ?? []) out.push(`  ${JSON.stringify(v)}`);
  }
  out.push('');
  out.push(r.ok ? 'SOAK PASSED' : 'SOAK FAILED');
  return out.join('\n');
}

/** The failover rows of the faults table (none when the kind was off). */
function failoverRows(r: Report): (string | number)[][] {
  if (!r.config.faults.includes('failover')) return [];
  const fo = r.faults.failovers;
  return [
    [
      'failover to the sync standby (kill → address moved, max)',
      `${fo.count}, ${ms(fo.maxDownMs)}`,
    ],
    [
      '  recovery: kill → a step completed (p50 / max)',
      `${ms(fo.recovery.p50)} / ${ms(fo.recovery.max)}`,
    ],
    [
      '  steps running at the kills; new standby built (max)',
      `${fo.heldSteps}; ${ms(fo.maxStandbyMs)}`,
    ],
  ];
}

/** The partition rows of the faults table (none when the kind was off). */
function partitionRows(r: Report): (string | number)[][] {
  if (!r.config.faults.includes('partition')) return [];
  const p = r.faults.partitions;
  return [
    ['worker host cut off (network partition; longest)', `${p.count}, ${ms(p.maxCutMs)}`],
    [
      '  takeover: cut → its steps claimed elsewhere (p50 / max)',
      `${ms(p.takeover.p50)} / ${ms(p.takeover.max)}`,
    ],
    [
      '  recovery: heal → it started new work (p50 / max)',
      `${ms(p.recovery.p50)} / ${ms(p.recovery.max)}`,
    ],
    ['  steps held at the cuts; unfinished', `${p.heldSteps}; ${p.unfinished}`],
    // Each partition whose recovery could not be seen, with the reason (never a bare null).
    ...p.unmeasured.map((u) => [`  recovery not measurable (${u.workerId})`, u.reason]),
  ];
}

/** The `pgbouncer` rows of the faults table (none when the kind was off). */
function pgbouncerRows(r: Report): (string | number)[][] {
  if (!r.config.faults.includes('pgbouncer')) return [];
  const b = r.faults.pgbouncer;
  return [
    [
      'PgBouncer killed and restarted / RECONNECT (longest down)',
      `${b.kills} / ${b.reconnects}, ${ms(b.maxDownMs)}`,
    ],
    [
      '  recovery: PgBouncer back → every worker working again (p50 / max)',
      `${ms(b.recovery.p50)} / ${ms(b.recovery.max)}`,
    ],
    ['  steps running at the faults; not recovered', `${b.heldSteps}; ${b.unrecovered}`],
  ];
}
