-- Waiting on tools (R9) (SQLite).

-- name: lock_tool_timeouts
-- waiting_tool tasks whose tool call has timed out, locked.
SELECT * FROM aq_tasks
WHERE state = 'waiting_tool' AND tool_deadline_at <= :now
ORDER BY tool_deadline_at
LIMIT :limit

-- name: lock_tool_work
-- waiting_tool tasks with a call these tools can take, locked.
-- Waiting tasks with a call one of these tools can take: waiting, or taken by a runner whose
-- lease on it ran out.
SELECT * FROM aq_tasks t
WHERE t.state = 'waiting_tool'
  AND EXISTS (
    SELECT 1 FROM json_each(t.tool_calls) AS c
    WHERE c.value ->> 'name' IN (SELECT value FROM json_each(:names))
      AND (c.value ->> 'state' = 'waiting'
           OR (c.value ->> 'state' = 'running' AND c.value ->> 'lease_until_ts' <= :now_ts)))
ORDER BY t.updated_at
LIMIT :limit

-- name: set_tool_calls
-- Replace a waiting task's tool calls, guarded by its audit position.
UPDATE aq_tasks SET tool_calls = :tool_calls
WHERE id = :id AND +state = 'waiting_tool' AND event_seq = :expected_seq
RETURNING id
