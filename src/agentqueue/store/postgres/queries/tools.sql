-- Waiting on tools (R9) (PostgreSQL).

-- name: lock_tool_timeouts
-- waiting_tool tasks whose tool call has timed out, locked.
SELECT * FROM aq_tasks
WHERE state = 'waiting_tool' AND tool_deadline_at <= %(now)s
ORDER BY tool_deadline_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: lock_tool_work
-- waiting_tool tasks with a call these tools can take, locked.
-- Waiting tasks with a call one of these tools can take: waiting, or taken by a runner whose
-- lease on it ran out.
SELECT * FROM aq_tasks t
WHERE t.state = 'waiting_tool'
  AND EXISTS (
    SELECT 1 FROM jsonb_array_elements(t.tool_calls) AS c
    WHERE c ->> 'name' = ANY(%(names)s::text[])
      AND (c ->> 'state' = 'waiting'
           OR (c ->> 'state' = 'running' AND (c ->> 'lease_until_ts')::float8 <= %(now_ts)s)))
ORDER BY t.updated_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: set_tool_calls
-- Replace a waiting task's tool calls, guarded by its audit position.
UPDATE aq_tasks SET tool_calls = %(tool_calls)s::jsonb
WHERE id = %(id)s AND state = 'waiting_tool' AND event_seq = %(expected_seq)s
RETURNING id
