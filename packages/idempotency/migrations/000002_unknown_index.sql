-- @cyclone/idempotency ledger, version 2: the unknown outcomes, indexed on their own. The metric
-- of the unknown outcomes open (`cyclone.idempotency.unknown_outcomes`) counts them at every
-- collection; this partial index holds only those rows, so the count reads them alone however
-- large the ledger grows. Building it reads the ledger once, blocking its writes meanwhile: on a
-- very large ledger, migrate at a quiet moment.
CREATE INDEX cyclone_idempotency_unknown ON {{schema}}.cyclone_idempotency (updated_at)
  WHERE phase = 'unknown';
