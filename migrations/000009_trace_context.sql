-- Cyclone core schema, version 9: the trace context of a run. The W3C traceparent of the span
-- that submitted it (`cyclone.submit`), so that each attempt's step span joins that trace in
-- whichever process and however much later it runs; NULL when no tracer was recording. A
-- nullable column without a default: adding it rewrites no row.
ALTER TABLE {{schema}}.cyclone_runs ADD COLUMN traceparent text;
