/**
 * The earlier form of `FakeStripe.inject` — one rule object, `{ fault: { type }, method, path,
 * idempotencyKey, times }`, in a fault vocabulary of its own — translated into the shared one
 * (`StripeFault` and its options), so that callers written against it keep working while they
 * move. Deprecated: it goes once no caller uses it.
 */
import type { StripeFault, StripeFaultOptions } from './faults.js';
import { defaultStripeError, type StripeErrorBody } from './resources/objects.js';

/**
 * A fault in the earlier vocabulary, and its `StripeFault` equivalent:
 * `refuse` → `{ kind: 'reset', commit: false }`; `error` → `{ kind: 'status' }` (`executed`,
 * `commit` as given, `error` merged into the body, `shouldRetry` as `stripe-should-retry`);
 * `drop_after_effect` → `{ kind: 'reset', commit: true }`; `delay_after_effect` →
 * `{ kind: 'delay', ms, commit: true }`; `hold` → `{ kind: 'hold' }`.
 * @deprecated use `StripeFault`.
 */
export type LegacyFault =
  | { type: 'refuse' }
  | {
      type: 'error';
      status: number;
      error?: Partial<StripeErrorBody>;
      executed?: boolean;
      commit?: boolean;
      shouldRetry?: boolean;
    }
  | { type: 'drop_after_effect' }
  | { type: 'delay_after_effect'; ms: number }
  | { type: 'hold' };

/**
 * A rule of the earlier form: a fault and which requests it hits.
 * @deprecated use `FakeStripe.inject(fault, options)`.
 */
export interface LegacyFaultRule {
  fault: LegacyFault;
  method?: string;
  path?: string | RegExp;
  idempotencyKey?: string | RegExp;
  times?: number;
}

/** True for a rule of the earlier form (it has a `fault`; a `StripeFault` has a `kind`). */
export function isLegacyRule(x: unknown): x is LegacyFaultRule {
  return typeof x === 'object' && x !== null && 'fault' in x && !('kind' in x);
}

/** The `inject(fault, options)` arguments of an earlier-form rule (see `LegacyFault`). */
export function fromLegacyRule(rule: LegacyFaultRule): [StripeFault, StripeFaultOptions] {
  const { fault: f, ...where } = rule;
  switch (f.type) {
    case 'refuse':
      return [{ kind: 'reset', commit: false }, where];
    case 'drop_after_effect':
      return [{ kind: 'reset', commit: true }, where];
    case 'delay_after_effect':
      return [{ kind: 'delay', ms: f.ms, commit: true }, where];
    case 'hold':
      return [{ kind: 'hold' }, where];
    case 'error':
      return [
        {
          kind: 'status',
          status: f.status,
          // The earlier default: only 402 and 5xx reached execution; `commit` did not imply it.
          executed: f.executed ?? (f.status === 402 || f.status >= 500),
          ...(f.commit ? { commit: true } : {}),
          ...(f.error ? { body: { error: { ...defaultStripeError(f.status), ...f.error } } } : {}),
          ...(f.shouldRetry === undefined
            ? {}
            : { headers: { 'stripe-should-retry': String(f.shouldRetry) } }),
        },
        where,
      ];
  }
}
