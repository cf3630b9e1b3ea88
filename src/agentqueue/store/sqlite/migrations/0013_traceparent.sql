-- The W3C trace context (traceparent) taken at submit, so each attempt's span is a child of the
-- caller's trace and command agents get it as TRACEPARENT. NULL: the task has none.
ALTER TABLE aq_tasks ADD COLUMN traceparent TEXT;
