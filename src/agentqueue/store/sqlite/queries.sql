-- Named queries for SQLite (sqlite3, :name parameters).
-- Times are integer microseconds. Bulk statements take one JSON array of row objects
-- (:rows) and read it with json_each: one statement per batch. JSON columns travel as
-- strings inside those objects so the stored text is exactly what was sent.

-- name: insert_tasks
INSERT INTO aq_tasks (id, tenant, source, source_id, title, task_type, payload, priority,
    state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
    requested_by, run_after, eligible_at, created_at, updated_at, event_seq, last_hash, hold,
    state_reason)
SELECT r.value ->> 'id', r.value ->> 'tenant', r.value ->> 'source', r.value ->> 'source_id',
    r.value ->> 'title', r.value ->> 'task_type', r.value ->> 'payload', r.value ->> 'priority',
    r.value ->> 'state', r.value ->> 'max_retries', r.value ->> 'timeout_secs',
    r.value ->> 'assignee', r.value ->> 'depends_on', r.value ->> 'idempotency_key',
    r.value ->> 'callback_url', r.value ->> 'requested_by', r.value ->> 'run_after',
    r.value ->> 'eligible_at', r.value ->> 'created_at', r.value ->> 'created_at',
    r.value ->> 'event_seq', r.value ->> 'last_hash', r.value ->> 'hold',
    r.value ->> 'state_reason'
FROM json_each(:rows) AS r
WHERE true
ORDER BY r.key
ON CONFLICT DO NOTHING
RETURNING id, seq

-- name: insert_events
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash)
SELECT r.value ->> 'e_task_id', r.value ->> 'e_seq', r.value ->> 'e_tenant', r.value ->> 'e_at',
    r.value ->> 'e_from', r.value ->> 'e_to', r.value ->> 'e_action', r.value ->> 'e_actor',
    r.value ->> 'e_reason', r.value ->> 'e_data', r.value ->> 'e_hash'
FROM json_each(:rows) AS r
WHERE r.value ->> 'e_task_id' IN (SELECT value FROM json_each(:written))

-- name: apply
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
    updated_at = r.value ->> 'updated_at',
    event_seq = r.value ->> 'event_seq',
    last_hash = r.value ->> 'last_hash'
FROM json_each(:rows) AS r
WHERE aq_tasks.id = r.value ->> 'id'
  AND aq_tasks.state = r.value ->> 'expected_state'
  AND aq_tasks.event_seq = r.value ->> 'expected_seq'
RETURNING aq_tasks.id

-- name: lock_tasks
SELECT * FROM aq_tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY id

-- name: lock_lapsed
SELECT * FROM aq_tasks
WHERE state = 'executing' AND lease_expires_at <= :now
ORDER BY lease_expires_at
LIMIT :limit

-- name: lock_due_retries
SELECT * FROM aq_tasks
WHERE state = 'retrying' AND run_after <= :now
ORDER BY run_after
LIMIT :limit

-- name: heartbeat
UPDATE aq_tasks SET
    heartbeat_at = :now,
    lease_expires_at = min(:now + :ttl_us, locked_at + timeout_secs * 1000000 + :grace_us)
FROM json_each(:rows) AS r
WHERE aq_tasks.id = r.value ->> 'id'
  AND aq_tasks.lock_token = r.value ->> 'token'
  AND +aq_tasks.state = 'executing'  -- unary +: look rows up by id, not by state
RETURNING aq_tasks.id

-- name: get_tasks
SELECT * FROM aq_tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND (:tenant IS NULL OR tenant = :tenant)

-- name: find_by_idempotency
SELECT t.* FROM json_each(:keys) AS k
JOIN aq_tasks AS t
  ON t.tenant = k.value ->> 'tenant' AND t.idempotency_key = k.value ->> 'key'

-- name: find_live_by_source
SELECT t.* FROM json_each(:keys) AS k
JOIN aq_tasks AS t
  ON t.tenant = k.value ->> 'tenant' AND t.source = k.value ->> 'source'
 AND t.source_id = k.value ->> 'source_id'
WHERE t.state NOT IN ('completed', 'failed', 'cancelled', 'archived')

-- name: list_tasks
SELECT * FROM aq_tasks
WHERE (:tenant IS NULL OR tenant = :tenant)
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:task_types IS NULL OR task_type IN (SELECT value FROM json_each(:task_types)))
  AND (:sources IS NULL OR source IN (SELECT value FROM json_each(:sources)))
  AND (:before_seq IS NULL OR seq < :before_seq)
ORDER BY seq DESC
LIMIT :limit

-- name: events
SELECT * FROM aq_events
WHERE task_id = :task_id AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY seq

-- name: count_by_state
SELECT state, count(*) AS count FROM aq_tasks
WHERE (:tenant IS NULL OR tenant = :tenant)
GROUP BY state

-- name: task_heads
SELECT id, tenant, event_seq, last_hash, state FROM aq_tasks ORDER BY id

-- name: all_events
SELECT * FROM aq_events ORDER BY task_id, seq

-- name: create_version_table
CREATE TABLE IF NOT EXISTS aq_schema_version (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)

-- name: applied_versions
SELECT version FROM aq_schema_version

-- name: record_version
INSERT INTO aq_schema_version (version, name) VALUES (:version, :name)

-- name: insert_logs
INSERT INTO aq_task_logs (task_id, tenant, attempt, stream, at, text, truncated)
SELECT r.value ->> 'task_id', r.value ->> 'tenant', r.value ->> 'attempt',
    r.value ->> 'stream', r.value ->> 'at', r.value ->> 'text', r.value ->> 'truncated'
FROM json_each(:rows) AS r

-- name: logs
SELECT task_id, tenant, attempt, stream, at, text, truncated FROM aq_task_logs
WHERE task_id = :task_id AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY id

-- The hot transitions, applied to a whole batch in few statements each. They implement exactly
-- what domain/states.py decides for ADMIT, CLAIM and COMPLETE (see BULK_ACTIONS there; tests hold
-- the two to the same result), and extend each task's audit chain with aq_event_hash(), the
-- domain's own chain_hash() registered on the connection; the batch's shared hash tail arrives
-- as :tail. In an UPDATE every expression reads
-- the row as it was, so event_seq + 1 and last_hash are the old head's successors.

-- name: claim
UPDATE aq_tasks SET
    state = 'executing',
    lock_token = aq_uuid(),
    locked_at = :now,
    heartbeat_at = :now,
    lease_expires_at = :now + min(:ttl_us, timeout_secs * 1000000 + :grace_us),
    assigned_to = :worker,
    started_at = :now,
    state_reason = NULL,
    updated_at = :now,
    event_seq = event_seq + 1,
    last_hash = aq_event_hash(last_hash, id, tenant, event_seq + 1, :tail)
WHERE state = 'queued' AND seq IN (
    -- The best tasks by (lane, aged priority, eligible_at, seq) are among the first `limit` of
    -- each priority level, so ten short index scans replace a sort of the whole queue (R4).
    SELECT t.seq FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS lv
    JOIN aq_tasks AS t ON t.seq IN (
        SELECT q.seq FROM aq_tasks AS q
        WHERE q.state = 'queued' AND q.priority = lv.column1
          AND (:task_types IS NULL OR q.task_type IN (SELECT value FROM json_each(:task_types)))
        ORDER BY q.eligible_at, q.seq
        LIMIT :limit)
    ORDER BY
        (t.priority <> 0),
        CASE WHEN t.priority = 0 THEN 0
             ELSE max(1, t.priority - (max(0, :now - t.eligible_at) / :aging_us)) END,
        t.eligible_at, t.seq
    LIMIT :limit)
RETURNING *

-- name: claim_events
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash)
SELECT id, event_seq, tenant, :now, 'queued', 'executing', 'claim', :worker, '', :data,
    last_hash
FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:ids))

-- name: admit
UPDATE aq_tasks SET
    state = 'queued',
    state_reason = NULL,
    updated_at = :now,
    event_seq = event_seq + 1,
    last_hash = aq_event_hash(last_hash, id, tenant, event_seq + 1, :tail)
WHERE state = 'pending' AND seq IN (
    SELECT t.seq FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS lv
    JOIN aq_tasks AS t ON t.seq IN (
        SELECT q.seq FROM aq_tasks AS q
        WHERE q.state = 'pending' AND q.priority = lv.column1
          AND q.eligible_at <= :now  -- max(created, run_after): "run_after has passed"
          AND q.depends_on = '[]'
        ORDER BY q.eligible_at, q.seq
        LIMIT :limit)
    ORDER BY
        (t.priority <> 0),
        CASE WHEN t.priority = 0 THEN 0
             ELSE max(1, t.priority - (max(0, :now - t.eligible_at) / :aging_us)) END,
        t.eligible_at, t.seq
    LIMIT :limit)
RETURNING id, priority, eligible_at, seq

-- name: admit_events
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash)
SELECT id, event_seq, tenant, :now, 'pending', 'queued', 'admit', :actor, '', :data, last_hash
FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:ids))

-- name: complete
-- Fenced: only rows still executing under the reported lock_token are completed.
UPDATE aq_tasks SET
    state = 'completed',
    result = r.value ->> 'result',
    error = NULL,
    state_reason = NULL,
    finished_at = :now,
    lock_token = NULL,
    locked_at = NULL,
    heartbeat_at = NULL,
    lease_expires_at = NULL,
    assigned_to = NULL,
    updated_at = :now,
    event_seq = aq_tasks.event_seq + 1,
    last_hash = aq_event_hash(aq_tasks.last_hash, aq_tasks.id, aq_tasks.tenant,
        aq_tasks.event_seq + 1, :tail)
FROM json_each(:rows) AS r
WHERE aq_tasks.id = r.value ->> 'id'
  AND +aq_tasks.state = 'executing'  -- unary +: look rows up by id, not by state
  AND aq_tasks.lock_token = r.value ->> 'token'
RETURNING aq_tasks.id AS id, aq_tasks.event_seq AS event_seq, aq_tasks.last_hash AS last_hash

-- name: complete_events
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash)
SELECT id, event_seq, tenant, :now, 'executing', 'completed', 'complete', :actor, '', :data,
    last_hash
FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:ids))

-- name: work_hints
-- What the scheduler steps and claimers would find right now, read cheaply from the partial
-- indexes, so an idle queue costs reads, not write transactions.
SELECT
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'executing' AND lease_expires_at <= :now) AS lapsed,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'retrying' AND run_after <= :now) AS due,
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'pending' AND eligible_at <= :now
              AND depends_on = '[]') AS admissible,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued') AS queued
