-- The audit trail as a whole, for verification (PostgreSQL).

-- name: task_heads
-- Every task head, by id, for verification.
SELECT id, tenant, event_seq, last_hash, state FROM aq_tasks ORDER BY id

-- name: all_events
-- Every event, by task and position, data as stored text.
SELECT task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data::text AS data,
       hash
FROM aq_events ORDER BY task_id, seq
