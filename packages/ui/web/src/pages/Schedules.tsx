/**
 * Cron schedules: each with its cron, zone, whether it is paused, its last and next fire; pause,
 * resume, or fire one run now (with the right to do so).
 */
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import type {
  ScheduleActionResponse,
  ScheduleRow,
  SchedulesResponse,
} from '../../../src/shared/api.ts';
import { get, post, seg } from '../api.ts';
import { ConfirmDialog, Empty, ErrorBox, PageHeader } from '../components/common.tsx';
import { Time } from '../format.tsx';
import { useMeta } from '../meta.ts';
import { usePoll } from '../settings.tsx';

type Act = 'pause' | 'resume' | 'trigger';

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** The schedules page. */
export function Schedules() {
  const meta = useMeta();
  const qc = useQueryClient();
  const [pending, setPending] = useState<{ name: string; act: Act } | null>(null);
  const q = useQuery({
    queryKey: ['schedules'],
    queryFn: () => get<SchedulesResponse>('/schedules'),
    refetchInterval: usePoll(3),
  });
  const act = useMutation({
    mutationFn: (p: { name: string; act: Act }) =>
      post<ScheduleActionResponse>(`/schedules/${seg(p.name)}/${p.act}`, {}),
    onSuccess: async () => {
      setPending(null);
      await qc.invalidateQueries({ queryKey: ['schedules'] });
    },
  });
  const items: ScheduleRow[] = q.data?.items ?? [];
  const can = meta.can.schedules;
  return (
    <div className="page" data-testid="page-schedules">
      <PageHeader title="Schedules" />
      <ErrorBox error={q.error} />
      {q.data && items.length === 0 ? <Empty>No schedule is declared.</Empty> : null}
      {items.length > 0 ? (
        <table className="table" data-testid="schedules-table">
          <thead>
            <tr>
              <th>Name</th>
              <th>Workflow</th>
              <th>Cron</th>
              <th>Zone</th>
              <th>Status</th>
              <th>Last fire</th>
              <th>Next fire</th>
              {can ? <th>Actions</th> : null}
            </tr>
          </thead>
          <tbody>
            {items.map((s) => (
              <tr key={s.name} data-name={s.name}>
                <td className="mono">{s.name}</td>
                <td>{str(s.workflow) ?? '—'}</td>
                <td className="mono">{str(s.cron) ?? '—'}</td>
                <td>{str(s.timezone) ?? 'UTC'}</td>
                <td>
                  <span className={`badge ${s.paused ? 'state-cancelled' : 'state-completed'}`}>
                    {s.paused ? '❚❚ paused' : '▶ active'}
                  </span>
                </td>
                <td>
                  <Time iso={str(s.lastFireAt)} />
                </td>
                <td>
                  <Time iso={s.paused ? null : str(s.nextFireAt)} />
                </td>
                {can ? (
                  <td className="row-actions">
                    <button
                      type="button"
                      onClick={() =>
                        setPending({ name: s.name, act: s.paused ? 'resume' : 'pause' })
                      }
                    >
                      {s.paused ? 'Resume' : 'Pause'}
                    </button>
                    <button
                      type="button"
                      onClick={() => setPending({ name: s.name, act: 'trigger' })}
                    >
                      Fire now
                    </button>
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <ConfirmDialog
        open={pending !== null}
        title={
          pending
            ? `${pending.act === 'trigger' ? 'Fire' : pending.act} schedule ${pending.name}`
            : ''
        }
        confirmLabel={pending?.act === 'trigger' ? 'Fire now' : (pending?.act ?? '')}
        busy={act.isPending}
        onConfirm={() => pending && act.mutate(pending)}
        onClose={() => {
          setPending(null);
          act.reset();
        }}
      >
        <p>
          {pending?.act === 'pause'
            ? 'No run is made for fire times while the schedule is paused.'
            : pending?.act === 'resume'
              ? 'The schedule fires again from its next fire time.'
              : 'One run is made now, outside the cron.'}
        </p>
        <ErrorBox error={act.error} />
      </ConfirmDialog>
    </div>
  );
}
