-- Deliveries written with the change that calls for them (R8) (SQLite).

-- name: enqueue_outbox
-- Store deliveries not stored yet; returns one row per new delivery.
INSERT INTO aq_outbox (kind, task_id, event_seq, tenant, url, body, next_attempt_at,
    created_at)
SELECT r.value ->> 'kind', r.value ->> 'task_id', r.value ->> 'event_seq',
    r.value ->> 'tenant', r.value ->> 'url', r.value ->> 'body', r.value ->> 'created_at',
    r.value ->> 'created_at'
FROM json_each(:rows) AS r
WHERE true
ON CONFLICT DO NOTHING
RETURNING id

-- name: lease_outbox
-- Take due deliveries of one kind and make them due again later.
-- The writer lock of BEGIN IMMEDIATE makes the pick and the push one step for every process.
UPDATE aq_outbox SET next_attempt_at = :until
WHERE id IN (
    SELECT id FROM aq_outbox
    WHERE kind = :kind AND delivered_at IS NULL AND next_attempt_at <= :now
    ORDER BY next_attempt_at, id
    LIMIT :limit)
RETURNING id, kind, task_id, event_seq, tenant, url, body, attempts, created_at

-- name: record_deliveries
-- Count each try, and mark it delivered or keep its error.
UPDATE aq_outbox SET
    attempts = attempts + 1,
    delivered_at = r.value ->> 'delivered_at',
    last_error = coalesce(r.value ->> 'error', last_error),
    next_attempt_at = coalesce(r.value ->> 'next_attempt_at', next_attempt_at)
FROM json_each(:rows) AS r
WHERE aq_outbox.id = r.value ->> 'id' AND aq_outbox.delivered_at IS NULL
