-- Deliveries written with the change that calls for them (R8) (PostgreSQL).

-- name: enqueue_outbox
-- Store deliveries not stored yet; returns one row per new delivery.
INSERT INTO aq_outbox (kind, task_id, event_seq, tenant, url, body, next_attempt_at,
    created_at)
SELECT r.kind, r.task_id, r.event_seq, r.tenant, r.url, r.body::jsonb, r.created_at,
    r.created_at
FROM json_to_recordset(%(rows)s::json) AS r(kind text, task_id uuid, event_seq integer,
    tenant text, url text, body text, created_at timestamptz)
ON CONFLICT DO NOTHING
RETURNING id

-- name: lease_outbox
-- Take due deliveries of one kind and make them due again later.
-- A row another deliverer has picked is skipped; once it commits, the row is not due any more.
UPDATE aq_outbox SET next_attempt_at = %(until)s
WHERE id IN (
    SELECT id FROM aq_outbox
    WHERE kind = %(kind)s AND delivered_at IS NULL AND next_attempt_at <= %(now)s
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id, kind, task_id, event_seq, tenant, url, body, attempts, created_at

-- name: record_deliveries
-- Count each try, and mark it delivered or keep its error.
UPDATE aq_outbox o SET
    attempts = o.attempts + 1,
    delivered_at = r.delivered_at,
    last_error = coalesce(r.error, o.last_error),
    next_attempt_at = coalesce(r.next_attempt_at, o.next_attempt_at)
FROM json_to_recordset(%(rows)s::json) AS r(id bigint, delivered_at timestamptz, error text,
    next_attempt_at timestamptz)
WHERE o.id = r.id AND o.delivered_at IS NULL
