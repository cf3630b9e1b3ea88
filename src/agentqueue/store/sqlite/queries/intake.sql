-- GitHub intake (R18): deliveries recorded once, and the ordering state of issues and pull
-- requests (SQLite: one writer at a time, so no row locks).

-- name: claim_intake_delivery
-- Record a delivery id unless it is recorded (a racing twin waits here for the first to commit).
INSERT INTO aq_intake_deliveries (delivery_id, event, received_at, answer)
VALUES (:delivery_id, :event, :received_at, '{}')
ON CONFLICT (delivery_id) DO NOTHING
RETURNING delivery_id

-- name: intake_delivery_answer
-- The answer a recorded delivery got.
SELECT answer FROM aq_intake_deliveries WHERE delivery_id = :delivery_id

-- name: record_intake_answer
-- Keep the answer a delivery got, for its redeliveries.
UPDATE aq_intake_deliveries SET answer = :answer WHERE delivery_id = :delivery_id

-- name: lock_intake_source
-- The ordering state of one issue or pull request (made empty if new), locked until commit.
INSERT INTO aq_intake_sources (tenant, source, source_id)
VALUES (:tenant, :source, :source_id)
ON CONFLICT (tenant, source, source_id) DO UPDATE SET tenant = excluded.tenant
RETURNING *

-- name: save_intake_source
-- Write the ordering state of one issue or pull request.
UPDATE aq_intake_sources
SET state = :state, state_at = :state_at, head_sha = :head_sha, head_at = :head_at
WHERE tenant = :tenant AND source = :source AND source_id = :source_id

-- name: lock_live_by_source
-- The live tasks of one (tenant, source, source id), locked, oldest first.
SELECT * FROM aq_tasks
WHERE tenant = :tenant AND source = :source AND source_id = :source_id
  AND state NOT IN ('completed', 'failed', 'cancelled', 'archived')
ORDER BY created_at, id
