-- Tasks: insert, guarded changes, locks and reads (SQLite: sqlite3, :name parameters).
-- Times are integer microseconds. Bulk statements take one JSON array of row objects
-- (:rows) and read it with json_each: one statement per batch. JSON columns travel as
-- strings inside those objects so the stored text is exactly what was sent.

-- name: insert_tasks
-- Insert new tasks, skipping any a uniqueness rule refuses; returns the id and seq of each inserted.
INSERT INTO aq_tasks (id, tenant, source, source_id, title, task_type, payload, priority,
    state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
    requested_by, run_after, eligible_at, created_at, updated_at, event_seq, last_hash, hold,
    state_reason, kind, labels, traceparent, in_reply_to)
SELECT r.value ->> 'id', r.value ->> 'tenant', r.value ->> 'source', r.value ->> 'source_id',
    r.value ->> 'title', r.value ->> 'task_type', r.value ->> 'payload', r.value ->> 'priority',
    r.value ->> 'state', r.value ->> 'max_retries', r.value ->> 'timeout_secs',
    r.value ->> 'assignee', r.value ->> 'depends_on', r.value ->> 'idempotency_key',
    r.value ->> 'callback_url', r.value ->> 'requested_by', r.value ->> 'run_after',
    r.value ->> 'eligible_at', r.value ->> 'created_at', r.value ->> 'created_at',
    r.value ->> 'event_seq', r.value ->> 'last_hash', r.value ->> 'hold',
    r.value ->> 'state_reason', coalesce(r.value ->> 'kind', 'task'),
    coalesce(r.value ->> 'labels', '[]'), r.value ->> 'traceparent', r.value ->> 'in_reply_to'
FROM json_each(:rows) AS r
WHERE true
ORDER BY r.key
ON CONFLICT DO NOTHING
RETURNING id, seq

-- name: insert_events
-- Append the events of the rows a statement just wrote (:written), from a JSON document.
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash, gseq, row_mac)
SELECT r.value ->> 'e_task_id', r.value ->> 'e_seq', r.value ->> 'e_tenant', r.value ->> 'e_at',
    r.value ->> 'e_from', r.value ->> 'e_to', r.value ->> 'e_action', r.value ->> 'e_actor',
    r.value ->> 'e_reason', r.value ->> 'e_data', r.value ->> 'e_hash',
    -- The next global numbers (R24): one writer at a time, so none is taken twice.
    (SELECT coalesce(max(gseq), 0) FROM aq_events WHERE gseq IS NOT NULL) + row_number() OVER (),
    -- The row as written, signed with its head event (R24); none for a purge (no row).
    (SELECT aq_row_mac(t.last_hash, t.state, t.priority, t.payload, t.result, t.assigned_to,
                       t.approved_by, t.retry_count)
     FROM aq_tasks t WHERE t.id = r.value ->> 'e_task_id' AND t.last_hash = r.value ->> 'e_hash')
FROM json_each(:events) AS r
WHERE r.value ->> 'e_task_id' IN (SELECT value FROM json_each(:written))

-- name: apply
-- Write decided changes, each guarded by its expected state and audit position; returns the ids written.
-- Each row names a task, its guard (expected state and audit position) and only the columns the
-- change sets: a key that is absent leaves its column alone (json_type is NULL for a missing key
-- and 'null' for a JSON null).
UPDATE aq_tasks SET
    state = r.value ->> 'state',
    state_reason = CASE WHEN json_type(r.value, '$.state_reason') IS NULL THEN state_reason ELSE r.value ->> 'state_reason' END,
    priority = CASE WHEN json_type(r.value, '$.priority') IS NULL THEN priority ELSE r.value ->> 'priority' END,
    retry_count = CASE WHEN json_type(r.value, '$.retry_count') IS NULL THEN retry_count ELSE r.value ->> 'retry_count' END,
    lock_token = CASE WHEN json_type(r.value, '$.lock_token') IS NULL THEN lock_token ELSE r.value ->> 'lock_token' END,
    locked_at = CASE WHEN json_type(r.value, '$.locked_at') IS NULL THEN locked_at ELSE r.value ->> 'locked_at' END,
    heartbeat_at = CASE WHEN json_type(r.value, '$.heartbeat_at') IS NULL THEN heartbeat_at ELSE r.value ->> 'heartbeat_at' END,
    lease_expires_at = CASE WHEN json_type(r.value, '$.lease_expires_at') IS NULL THEN lease_expires_at ELSE r.value ->> 'lease_expires_at' END,
    assignee = CASE WHEN json_type(r.value, '$.assignee') IS NULL THEN assignee ELSE r.value ->> 'assignee' END,
    assigned_to = CASE WHEN json_type(r.value, '$.assigned_to') IS NULL THEN assigned_to ELSE r.value ->> 'assigned_to' END,
    checkpoint = CASE WHEN json_type(r.value, '$.checkpoint') IS NULL THEN checkpoint ELSE r.value ->> 'checkpoint' END,
    tool_calls = CASE WHEN json_type(r.value, '$.tool_calls') IS NULL THEN tool_calls ELSE r.value ->> 'tool_calls' END,
    result = CASE WHEN json_type(r.value, '$.result') IS NULL THEN result ELSE r.value ->> 'result' END,
    error = CASE WHEN json_type(r.value, '$.error') IS NULL THEN error ELSE r.value ->> 'error' END,
    approved_by = CASE WHEN json_type(r.value, '$.approved_by') IS NULL THEN approved_by ELSE r.value ->> 'approved_by' END,
    run_after = CASE WHEN json_type(r.value, '$.run_after') IS NULL THEN run_after ELSE r.value ->> 'run_after' END,
    eligible_at = CASE WHEN json_type(r.value, '$.eligible_at') IS NULL THEN eligible_at ELSE r.value ->> 'eligible_at' END,
    started_at = CASE WHEN json_type(r.value, '$.started_at') IS NULL THEN started_at ELSE r.value ->> 'started_at' END,
    finished_at = CASE WHEN json_type(r.value, '$.finished_at') IS NULL THEN finished_at ELSE r.value ->> 'finished_at' END,
    hold = CASE WHEN json_type(r.value, '$.hold') IS NULL THEN hold ELSE r.value ->> 'hold' END,
    tool_deadline_at = CASE WHEN json_type(r.value, '$.tool_deadline_at') IS NULL THEN tool_deadline_at ELSE r.value ->> 'tool_deadline_at' END,
    agent = CASE WHEN json_type(r.value, '$.agent') IS NULL THEN agent ELSE r.value ->> 'agent' END,
    updated_at = r.value ->> 'updated_at',
    event_seq = r.value ->> 'event_seq',
    last_hash = r.value ->> 'last_hash'
FROM json_each(:rows) AS r
WHERE aq_tasks.id = r.value ->> 'id'
  AND aq_tasks.state = r.value ->> 'expected_state'
  AND aq_tasks.event_seq = r.value ->> 'expected_seq'
RETURNING aq_tasks.id

-- name: lock_tasks
-- The tasks with these ids (in a tenant, if given), locked until commit.
SELECT * FROM aq_tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY id

-- name: lock_lapsed
-- Executing tasks whose lease has run out, locked, oldest lease first.
SELECT * FROM aq_tasks
WHERE state = 'executing' AND lease_expires_at <= :now
ORDER BY lease_expires_at
LIMIT :limit

-- name: lock_due_retries
-- Retrying tasks whose backoff has elapsed, locked, earliest first.
SELECT * FROM aq_tasks
WHERE state = 'retrying' AND run_after <= :now
ORDER BY run_after
LIMIT :limit

-- name: get_tasks
-- The tasks with these ids (in a tenant, if given).
SELECT * FROM aq_tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND (:tenant IS NULL OR tenant = :tenant)

-- name: replies
-- The replies to any of these tasks (in_reply_to), oldest first.
SELECT * FROM aq_tasks
WHERE tenant = :tenant AND in_reply_to IN (SELECT value FROM json_each(:ids))
ORDER BY created_at, seq

-- name: find_by_idempotency
-- Tasks sharing a (tenant, idempotency key) with any of the keys given.
SELECT t.* FROM json_each(:keys) AS k
JOIN aq_tasks AS t
  ON t.tenant = k.value ->> 'tenant' AND t.idempotency_key = k.value ->> 'key'

-- name: find_live_by_source
-- Live tasks sharing a (tenant, source, source id) with any of the keys given.
SELECT t.* FROM json_each(:keys) AS k
JOIN aq_tasks AS t
  ON t.tenant = k.value ->> 'tenant' AND t.source = k.value ->> 'source'
 AND t.source_id = k.value ->> 'source_id'
WHERE t.state NOT IN ('completed', 'failed', 'cancelled', 'archived')

-- name: list_tasks
-- Tasks matching a filter, newest first.
SELECT * FROM aq_tasks
WHERE (:tenant IS NULL OR tenant = :tenant)
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:task_types IS NULL OR task_type IN (SELECT value FROM json_each(:task_types)))
  AND (:sources IS NULL OR source IN (SELECT value FROM json_each(:sources)))
  AND (:source_id IS NULL OR source_id = :source_id)
  AND (:assignee IS NULL OR assignee = :assignee)
  AND (:agent IS NULL OR agent = :agent)
  -- Text anywhere in the title or the source id, whatever its case (ASCII case only).
  AND (:text IS NULL OR instr(lower(title), lower(:text)) > 0
       OR instr(lower(coalesce(source_id, '')), lower(:text)) > 0)
  -- Every label asked for (a JSON array) is among the task's: none is missing.
  AND (:labels IS NULL OR NOT EXISTS (
      SELECT 1 FROM json_each(:labels) AS wanted
      WHERE wanted.value NOT IN (SELECT value FROM json_each(aq_tasks.labels))))
  AND (:created_after IS NULL OR created_at >= :created_after)
  AND (:created_before IS NULL OR created_at < :created_before)
  AND (:before_seq IS NULL OR seq < :before_seq)
ORDER BY seq DESC
LIMIT :limit

-- name: events
-- The audit events of one task, in order, data as stored text.
SELECT * FROM aq_events
WHERE task_id = :task_id AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY seq

-- name: count_by_state
-- How many tasks are in each state.
SELECT state, count(*) AS count FROM aq_tasks
WHERE (:tenant IS NULL OR tenant = :tenant)
GROUP BY state

-- name: count_parked
-- How many pending tasks admission has set aside for now.
-- Pending tasks no agent can take, set aside by admission until route_after.
SELECT count(*) AS count FROM aq_tasks
WHERE state = 'pending' AND route_after > :now AND (:tenant IS NULL OR tenant = :tenant)

-- name: insert_logs
-- Keep captured output with its task, from a JSON document.
INSERT INTO aq_task_logs (task_id, tenant, attempt, stream, at, text, truncated)
SELECT r.value ->> 'task_id', r.value ->> 'tenant', r.value ->> 'attempt',
    r.value ->> 'stream', r.value ->> 'at', r.value ->> 'text', r.value ->> 'truncated'
FROM json_each(:rows) AS r

-- name: logs
-- Captured output of one task, oldest first.
SELECT task_id, tenant, attempt, stream, at, text, truncated FROM aq_task_logs
WHERE task_id = :task_id AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY id

-- name: work_hints
-- Whether each kind of work exists right now, one flag a column.
-- What the scheduler steps and claimers would find right now, read cheaply from the partial
-- indexes, so an idle queue costs reads, not write transactions.
SELECT
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'executing' AND lease_expires_at <= :now) AS lapsed,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'retrying' AND run_after <= :now) AS due,
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'pending' AND eligible_at <= :now) AS admissible,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued') AS queued,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'blocked' AND hold = 'dependencies') AS held,
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'waiting_tool' AND tool_deadline_at <= :now) AS tool_timeouts,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued' AND priority = 0) AS p0_queued,
    -- The earliest slot of any cron schedule, from its index: the cron step reads the due
    -- schedules only once it has come.
    (SELECT next_at FROM aq_schedules ORDER BY next_at LIMIT 1) AS next_schedule_at

-- name: lock_dependents_ready
-- Tasks held for dependencies that can move now, locked.
-- Tasks held for dependencies that can move: every dependency completed, or one of them ended
-- without completing (or no longer exists). Only the dependency hold: never an approval hold.
SELECT t.* FROM aq_tasks t
WHERE t.state = 'blocked' AND t.hold = 'dependencies'
  AND (
    NOT EXISTS (
        SELECT 1 FROM json_each(t.depends_on) AS dep
        LEFT JOIN aq_tasks d ON d.id = dep.value
        WHERE d.state IS NOT 'completed')
    OR EXISTS (
        SELECT 1 FROM json_each(t.depends_on) AS dep
        LEFT JOIN aq_tasks d ON d.id = dep.value
        WHERE d.id IS NULL OR d.state IN ('failed', 'cancelled', 'dead_letter', 'archived'))
  )
ORDER BY t.seq
LIMIT :limit

-- name: task_states
-- The current state of each task among these ids.
SELECT id, state FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:ids))
