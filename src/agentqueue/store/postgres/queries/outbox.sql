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
-- Take due deliveries of one kind under a lease token and make them due again at the lease's end.
-- A row another deliverer has picked is skipped; once it commits, the row is not due any more.
UPDATE aq_outbox SET next_attempt_at = %(until)s, lease_token = %(token)s
WHERE id IN (
    SELECT id FROM aq_outbox
    WHERE kind = %(kind)s AND delivered_at IS NULL AND given_up_at IS NULL
        AND next_attempt_at <= %(now)s
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id, kind, task_id, event_seq, tenant, url, body, attempts, created_at, lease_token

-- name: record_attempts
-- Keep each try of a delivery whose lease the recorder still holds (run before record_deliveries,
-- which ends the lease).
INSERT INTO aq_delivery_attempts (outbox_id, at, status_code, duration_ms, error)
SELECT o.id, r.at, r.status_code, r.duration_ms, r.error
FROM json_to_recordset(%(rows)s::json) AS r(id bigint, lease_token uuid, at timestamptz,
    status_code integer, duration_ms double precision, error text)
JOIN aq_outbox o ON o.id = r.id AND o.lease_token = r.lease_token
WHERE o.delivered_at IS NULL AND o.given_up_at IS NULL
ORDER BY o.id

-- name: record_deliveries
-- Count each try whose lease still holds, end the lease, and mark it delivered or given up, or
-- keep its error and when to try next; returns the ids recorded.
UPDATE aq_outbox o SET
    attempts = o.attempts + 1,
    lease_token = NULL,
    delivered_at = r.delivered_at,
    given_up_at = r.given_up_at,
    last_error = coalesce(r.error, o.last_error),
    last_status = coalesce(r.status_code, o.last_status),
    next_attempt_at = coalesce(r.next_attempt_at, o.next_attempt_at)
FROM json_to_recordset(%(rows)s::json) AS r(id bigint, lease_token uuid,
    delivered_at timestamptz, given_up_at timestamptz, error text, status_code integer,
    next_attempt_at timestamptz)
WHERE o.id = r.id AND o.lease_token = r.lease_token
    AND o.delivered_at IS NULL AND o.given_up_at IS NULL
RETURNING o.id

-- name: release_outbox
-- Hand back deliveries leased under these tokens and not recorded: due again at once.
UPDATE aq_outbox SET lease_token = NULL, next_attempt_at = %(now)s
WHERE lease_token = ANY(%(tokens)s::uuid[]) AND delivered_at IS NULL AND given_up_at IS NULL
RETURNING id

-- name: retry_delivery
-- Make a pending or given-up delivery (in a tenant, if given) due now, unless a lease holds it.
UPDATE aq_outbox SET next_attempt_at = %(now)s, given_up_at = NULL, lease_token = NULL
WHERE id = %(id)s AND delivered_at IS NULL
    AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
    AND (lease_token IS NULL OR next_attempt_at <= %(now)s)
RETURNING id

-- name: next_outbox_due
-- When the earliest undelivered delivery of these kinds is due (one index read per kind).
SELECT min(next_attempt_at) AS due FROM aq_outbox
WHERE kind = ANY(%(kinds)s::text[]) AND delivered_at IS NULL AND given_up_at IS NULL

-- name: list_deliveries
-- Deliveries matching the filters (in a tenant, if given), newest first.
SELECT id, kind, task_id, event_seq, tenant, url, body, attempts, next_attempt_at,
    delivered_at, given_up_at, last_error, last_status, created_at,
    lease_token IS NOT NULL AND delivered_at IS NULL AND given_up_at IS NULL AS leased
FROM aq_outbox
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
    AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
    AND (%(task_id)s::uuid IS NULL OR task_id = %(task_id)s::uuid)
    AND (%(state)s::text IS NULL
        OR (%(state)s = 'delivered' AND delivered_at IS NOT NULL)
        OR (%(state)s = 'given_up' AND given_up_at IS NOT NULL)
        OR (%(state)s = 'pending' AND delivered_at IS NULL AND given_up_at IS NULL))
ORDER BY id DESC
LIMIT %(limit)s

-- name: get_delivery
-- One delivery (in a tenant, if given).
SELECT id, kind, task_id, event_seq, tenant, url, body, attempts, next_attempt_at,
    delivered_at, given_up_at, last_error, last_status, created_at,
    lease_token IS NOT NULL AND delivered_at IS NULL AND given_up_at IS NULL AS leased
FROM aq_outbox
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: delivery_attempts
-- Every try of one delivery, oldest first.
SELECT at, status_code, duration_ms, error FROM aq_delivery_attempts
WHERE outbox_id = %(id)s
ORDER BY id
