-- Cron schedules (R18) (PostgreSQL).

-- name: insert_schedule
-- Add a schedule unless its tenant has one by that name.
INSERT INTO aq_schedules (tenant, name, cron, tz, task, catch_up, next_at, created_by,
    created_at, updated_at)
VALUES (%(tenant)s, %(name)s, %(cron)s, %(tz)s, %(task)s::jsonb, %(catch_up)s, %(next_at)s,
    %(created_by)s, %(now)s, %(now)s)
ON CONFLICT (tenant, name) DO NOTHING
RETURNING *

-- name: list_schedules
-- The schedules of a tenant (or of all), by tenant and name.
SELECT * FROM aq_schedules
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY tenant, name

-- name: delete_schedule
-- Remove a schedule; returns it as it was.
DELETE FROM aq_schedules WHERE tenant = %(tenant)s AND name = %(name)s
RETURNING *

-- name: due_schedules
-- Schedules whose next slot has come, earliest first.
-- Served by aq_schedules_due: when nothing is due this reads one index entry.
SELECT * FROM aq_schedules WHERE next_at <= %(now)s ORDER BY next_at LIMIT %(limit)s

-- name: advance_schedule
-- Move a schedule on to its next slot, guarded by the slot read.
-- Guarded by the slot read: of several schedulers handling the same slot, one moves it on.
UPDATE aq_schedules SET
    next_at = %(next_at)s,
    last_slot_at = COALESCE(%(last_slot_at)s::timestamptz, last_slot_at),
    last_fired_at = CASE WHEN %(last_slot_at)s::timestamptz IS NULL THEN last_fired_at
                         ELSE %(now)s END,
    updated_at = %(now)s
WHERE tenant = %(tenant)s AND name = %(name)s AND next_at = %(expected)s
