/**
 * The run's side of a step's discard, written once: the failed attempt's discard
 * (`failStepSql`, sql/complete.ts) and the discard of a step whose limit key cannot be computed
 * (`discardKeyStepSql`, sql/flow.ts) move the run's counters the same way, so the two cannot
 * drift apart.
 */

/**
 * The head of an `UPDATE` of the run row (alias `r`) for one step discarded: one active step
 * fewer, and the run `failed` (with its `completed_at`) when that step was its last active one
 * while it was running. The caller adds the `FROM`, `WHERE` (which run, only when the step was
 * discarded) and `RETURNING` clauses.
 * @param s the quoted schema.
 */
export const runStepDiscardedSql = (s: string) => `UPDATE ${s}.cyclone_runs r
  SET steps_active = r.steps_active - 1,
      state = CASE WHEN r.state = 'running' AND r.steps_active = 1 THEN 'failed' ELSE r.state END,
      completed_at = CASE WHEN r.state = 'running' AND r.steps_active = 1 THEN now() ELSE r.completed_at END,
      updated_at = now()`;
