-- Cyclone core schema, version 13: a completion that raises when it is fenced out.
--
-- cyclone_fenced_out(run_id, node, attempt) raises SQLSTATE YC001 (class YC is not one of
-- PostgreSQL's). The completion on a handler's completionTx calls it when its fenced update
-- matched no row (the step is no longer running at that attempt): the statement then fails
-- instead of returning no row, so a COMMIT sent right behind it, without waiting for its
-- answer, finds the transaction aborted and rolls the handler's writes back. Volatile, so the
-- planner never evaluates it ahead of the fence.
CREATE FUNCTION {{schema}}.cyclone_fenced_out(run_id uuid, node text, attempt int)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION 'step % of run % is no longer running at attempt % (fenced out)',
    node, run_id, attempt
    USING ERRCODE = 'YC001';
END
$$;
