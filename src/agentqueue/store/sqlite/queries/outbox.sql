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
-- Take due deliveries of one kind under a lease token and make them due again at the lease's end.
-- The writer lock of BEGIN IMMEDIATE makes the pick and the push one step for every process.
UPDATE aq_outbox SET next_attempt_at = :until, lease_token = :token
WHERE id IN (
    SELECT id FROM aq_outbox
    WHERE kind = :kind AND delivered_at IS NULL AND given_up_at IS NULL
        AND next_attempt_at <= :now
    ORDER BY next_attempt_at, id
    LIMIT :limit)
RETURNING id, kind, task_id, event_seq, tenant, url, body, attempts, created_at, lease_token

-- name: record_attempts
-- Keep each try of a delivery whose lease the recorder still holds (run before record_deliveries,
-- which ends the lease).
INSERT INTO aq_delivery_attempts (outbox_id, at, status_code, duration_ms, error)
SELECT o.id, r.value ->> 'at', r.value ->> 'status_code', r.value ->> 'duration_ms',
    r.value ->> 'error'
FROM json_each(:rows) AS r
JOIN aq_outbox AS o ON o.id = r.value ->> 'id' AND o.lease_token = r.value ->> 'lease_token'
WHERE o.delivered_at IS NULL AND o.given_up_at IS NULL
ORDER BY o.id

-- name: record_deliveries
-- Count each try whose lease still holds, end the lease, and mark it delivered or given up, or
-- keep its error and when to try next; returns the ids recorded.
UPDATE aq_outbox SET
    attempts = attempts + 1,
    lease_token = NULL,
    delivered_at = r.value ->> 'delivered_at',
    given_up_at = r.value ->> 'given_up_at',
    last_error = coalesce(r.value ->> 'error', last_error),
    last_status = coalesce(r.value ->> 'status_code', last_status),
    next_attempt_at = coalesce(r.value ->> 'next_attempt_at', next_attempt_at)
FROM json_each(:rows) AS r
WHERE aq_outbox.id = r.value ->> 'id' AND aq_outbox.lease_token = r.value ->> 'lease_token'
    AND aq_outbox.delivered_at IS NULL AND aq_outbox.given_up_at IS NULL
RETURNING aq_outbox.id AS id

-- name: release_outbox
-- Hand back deliveries leased under these tokens and not recorded: due again at once.
UPDATE aq_outbox SET lease_token = NULL, next_attempt_at = :now
WHERE lease_token IN (SELECT value FROM json_each(:tokens))
    AND delivered_at IS NULL AND given_up_at IS NULL
RETURNING id

-- name: retry_delivery
-- Make a pending or given-up delivery (in a tenant, if given) due now, unless a lease holds it.
UPDATE aq_outbox SET next_attempt_at = :now, given_up_at = NULL, lease_token = NULL
WHERE id = :id AND delivered_at IS NULL
    AND (:tenant IS NULL OR tenant = :tenant)
    AND (lease_token IS NULL OR next_attempt_at <= :now)
RETURNING id

-- name: next_outbox_due
-- When the earliest undelivered delivery of these kinds is due (one index read per kind).
SELECT min(next_attempt_at) AS due FROM aq_outbox
WHERE kind IN (SELECT value FROM json_each(:kinds))
    AND delivered_at IS NULL AND given_up_at IS NULL

-- name: list_deliveries
-- Deliveries matching the filters (in a tenant, if given), newest first.
SELECT id, kind, task_id, event_seq, tenant, url, body, attempts, next_attempt_at,
    delivered_at, given_up_at, last_error, last_status, created_at,
    lease_token IS NOT NULL AND delivered_at IS NULL AND given_up_at IS NULL AS leased
FROM aq_outbox
WHERE (:kind IS NULL OR kind = :kind)
    AND (:tenant IS NULL OR tenant = :tenant)
    AND (:task_id IS NULL OR task_id = :task_id)
    AND (:state IS NULL
        OR (:state = 'delivered' AND delivered_at IS NOT NULL)
        OR (:state = 'given_up' AND given_up_at IS NOT NULL)
        OR (:state = 'pending' AND delivered_at IS NULL AND given_up_at IS NULL))
ORDER BY id DESC
LIMIT :limit

-- name: get_delivery
-- One delivery (in a tenant, if given).
SELECT id, kind, task_id, event_seq, tenant, url, body, attempts, next_attempt_at,
    delivered_at, given_up_at, last_error, last_status, created_at,
    lease_token IS NOT NULL AND delivered_at IS NULL AND given_up_at IS NULL AS leased
FROM aq_outbox
WHERE id = :id AND (:tenant IS NULL OR tenant = :tenant)

-- name: delivery_attempts
-- Every try of one delivery, oldest first.
SELECT at, status_code, duration_ms, error FROM aq_delivery_attempts
WHERE outbox_id = :id
ORDER BY id
