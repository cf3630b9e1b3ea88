-- Dead letter retention (R8) (PostgreSQL).

-- name: lock_expired_dead_letters
-- Dead letters past their retention, locked, oldest first.
SELECT * FROM aq_tasks
WHERE state = 'dead_letter' AND updated_at <= %(latest)s
  AND updated_at <= CASE WHEN priority = 0 THEN %(p0_before)s::timestamptz
                         ELSE %(other_before)s::timestamptz END
ORDER BY updated_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: purge
-- Delete dead letters whose guard holds; returns the ids deleted.
-- Guarded like apply: only rows still in dead_letter at the expected audit position go. Their
-- last events are appended and their captured output deleted in the same statement.
WITH v AS (
    SELECT * FROM json_to_recordset(%(rows)s::json) AS v(id uuid, expected_seq integer)
), del AS (
    DELETE FROM aq_tasks t USING v
    WHERE t.id = v.id AND t.state = 'dead_letter' AND t.event_seq = v.expected_seq
    RETURNING t.id
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT e.e_task_id, e.e_seq, e.e_tenant, e.e_at, e.e_from, e.e_to, e.e_action, e.e_actor,
        e.e_reason, e.e_data::json, e.e_hash
    FROM json_to_recordset(%(events)s::json) AS e(e_task_id uuid, e_seq integer, e_tenant text,
        e_at timestamptz, e_from text, e_to text, e_action text, e_actor text, e_reason text,
        e_data text, e_hash text)
    WHERE e.e_task_id IN (SELECT id FROM del)
), logs AS (
    DELETE FROM aq_task_logs WHERE task_id IN (SELECT id FROM del)
)
SELECT id FROM del
