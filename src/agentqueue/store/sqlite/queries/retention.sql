-- Dead letter retention (R8) (SQLite).

-- name: lock_expired_dead_letters
-- Dead letters past their retention, locked, oldest first.
SELECT * FROM aq_tasks
WHERE state = 'dead_letter' AND updated_at <= :latest
  AND updated_at <= CASE WHEN priority = 0 THEN :p0_before ELSE :other_before END
ORDER BY updated_at
LIMIT :limit

-- name: purge_logs
-- Delete the captured output of the tasks just purged (:written).
DELETE FROM aq_task_logs WHERE task_id IN (SELECT value FROM json_each(:written))

-- name: purge
-- Delete dead letters whose guard holds; returns the ids deleted.
DELETE FROM aq_tasks
WHERE id IN (SELECT r.value ->> 'id' FROM json_each(:rows) AS r)
  AND state = 'dead_letter'
  AND event_seq = (SELECT r.value ->> 'expected_seq' FROM json_each(:rows) AS r
                   WHERE r.value ->> 'id' = aq_tasks.id)
RETURNING id
