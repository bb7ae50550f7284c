/**
 * The zod schemas of the API's query strings and bodies. Everything the page sends is checked
 * here before it reaches a read or an action; a failure answers 400 `bad_request` with zod's
 * issues as `details`.
 */
import { z } from 'zod';
import { ApiFailure } from './errors.js';
import { BULK_IDS_MAX, PAGE_DEFAULT, PAGE_MAX, RUN_STATES } from './shared/api.js';

const isoTime = z.iso.datetime({ offset: true });
const runState = z.enum(RUN_STATES as ['running', 'completed', 'failed', 'cancelled']);
/** A name as core stores it: non-empty text, at most 1,000 characters. */
const name = z.string().min(1).max(1000);
const uuid = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'not a run id');

/** The filters of the runs list and of a bulk action. */
export const runsFilter = z.strictObject({
  state: runState.optional(),
  workflow: name.optional(),
  from: isoTime.optional(),
  to: isoTime.optional(),
});

/** `GET /api/runs`. */
export const runsQuery = runsFilter.extend({
  cursor: z.string().min(1).max(2000).optional(),
  dir: z.enum(['older', 'newer']).default('older'),
  limit: z.coerce.number().int().min(1).max(PAGE_MAX).default(PAGE_DEFAULT),
});

/** `GET /api/stats/throughput`. */
export const throughputQuery = z.strictObject({
  window: z.enum(['1h', '24h', '7d']).default('1h'),
  workflow: name.optional(),
});

/** `GET /api/lookup`. */
export const lookupQuery = z.strictObject({ q: z.string().trim().min(1).max(5000) });

/** `GET /api/unknown`. */
export const unknownQuery = z.strictObject({
  olderThanMs: z.coerce.number().int().min(0).default(0),
  cursor: z.string().min(1).max(2000).optional(),
  limit: z.coerce.number().int().min(1).max(PAGE_MAX).default(PAGE_DEFAULT),
});

/** `GET /api/runs/:id/ledger`. */
export const ledgerQuery = z.strictObject({ node: name.optional() });

/** `GET /api/runs/:id/input`. */
export const inputQuery = z.strictObject({ raw: z.enum(['0', '1']).optional() });

/** A run id in the path. */
export const runId = uuid;

/** `POST /api/runs/:id/retry`. */
export const retryBody = z.union([
  z.strictObject({ node: name }),
  z.strictObject({ all: z.literal(true) }),
]);

/** `POST /api/runs/:id/cancel` and the schedule actions: an empty object. */
export const emptyBody = z.strictObject({});

/** `POST /api/runs/:id/signal`. */
export const signalBody = z.strictObject({
  name: z.string().min(1),
  payload: z.unknown().optional(),
});

/** `POST /api/runs/bulk`: `ids` or `filter`, not both. */
export const bulkBody = z
  .strictObject({
    action: z.enum(['retryAll', 'cancel']),
    ids: z.array(uuid).min(1).max(BULK_IDS_MAX).optional(),
    filter: runsFilter.optional(),
    cursor: z.string().min(1).max(2000).optional(),
    expect: z.number().int().min(0).optional(),
  })
  .refine((b) => (b.ids === undefined) !== (b.filter === undefined), {
    message: 'give either ids or filter',
  })
  .refine((b) => b.cursor === undefined || b.filter !== undefined, {
    message: 'cursor goes with filter',
  });

/**
 * `value` parsed by `schema`.
 * @throws ApiFailure 400 `bad_request` with zod's issues.
 */
export function parse<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw new ApiFailure(400, 'bad_request', `Bad ${what}: ${z.prettifyError(result.error)}`, {
    details: result.error.issues.map((i) => ({ path: i.path, message: i.message })),
  });
}
