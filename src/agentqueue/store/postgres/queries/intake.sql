-- GitHub intake (R18): deliveries recorded once, and the ordering state of issues and pull
-- requests (PostgreSQL).

-- name: claim_intake_delivery
-- Record a delivery id unless it is recorded (a racing twin waits here for the first to commit).
INSERT INTO aq_intake_deliveries (delivery_id, event, received_at, answer)
VALUES (%(delivery_id)s, %(event)s, %(received_at)s, '{}'::jsonb)
ON CONFLICT (delivery_id) DO NOTHING
RETURNING delivery_id

-- name: intake_delivery_answer
-- The answer a recorded delivery got.
SELECT answer FROM aq_intake_deliveries WHERE delivery_id = %(delivery_id)s

-- name: record_intake_answer
-- Keep the answer a delivery got, for its redeliveries.
UPDATE aq_intake_deliveries SET answer = %(answer)s::jsonb WHERE delivery_id = %(delivery_id)s

-- name: lock_intake_source
-- The ordering state of one issue or pull request (made empty if new), locked until commit.
INSERT INTO aq_intake_sources (tenant, source, source_id)
VALUES (%(tenant)s, %(source)s, %(source_id)s)
ON CONFLICT (tenant, source, source_id) DO UPDATE SET tenant = EXCLUDED.tenant
RETURNING *

-- name: save_intake_source
-- Write the ordering state of one issue or pull request.
UPDATE aq_intake_sources
SET state = %(state)s, state_at = %(state_at)s, head_sha = %(head_sha)s, head_at = %(head_at)s
WHERE tenant = %(tenant)s AND source = %(source)s AND source_id = %(source_id)s

-- name: lock_live_by_source
-- The live tasks of one (tenant, source, source id), locked, oldest first.
SELECT * FROM aq_tasks
WHERE tenant = %(tenant)s AND source = %(source)s AND source_id = %(source_id)s
  AND state NOT IN ('completed', 'failed', 'cancelled', 'archived')
ORDER BY created_at, id
FOR UPDATE
