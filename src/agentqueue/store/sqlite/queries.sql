-- Named queries for SQLite (sqlite3, :name parameters).
-- Times are integer microseconds. Bulk statements take one JSON array of row objects
-- (:rows) and read it with json_each: one statement per batch. JSON columns travel as
-- strings inside those objects so the stored text is exactly what was sent.

-- name: insert_tasks
INSERT INTO aq_tasks (id, tenant, source, source_id, title, task_type, payload, priority,
    state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
    requested_by, run_after, eligible_at, created_at, updated_at, event_seq, last_hash)
SELECT r.value ->> 'id', r.value ->> 'tenant', r.value ->> 'source', r.value ->> 'source_id',
    r.value ->> 'title', r.value ->> 'task_type', r.value ->> 'payload', r.value ->> 'priority',
    r.value ->> 'state', r.value ->> 'max_retries', r.value ->> 'timeout_secs',
    r.value ->> 'assignee', r.value ->> 'depends_on', r.value ->> 'idempotency_key',
    r.value ->> 'callback_url', r.value ->> 'requested_by', r.value ->> 'run_after',
    r.value ->> 'eligible_at', r.value ->> 'created_at', r.value ->> 'created_at',
    r.value ->> 'event_seq', r.value ->> 'last_hash'
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
UPDATE aq_tasks SET
    state = r.value ->> 'state',
    state_reason = r.value ->> 'state_reason',
    priority = r.value ->> 'priority',
    retry_count = r.value ->> 'retry_count',
    lock_token = r.value ->> 'lock_token',
    locked_at = r.value ->> 'locked_at',
    heartbeat_at = r.value ->> 'heartbeat_at',
    lease_expires_at = r.value ->> 'lease_expires_at',
    assignee = r.value ->> 'assignee',
    assigned_to = r.value ->> 'assigned_to',
    checkpoint = r.value ->> 'checkpoint',
    tool_calls = r.value ->> 'tool_calls',
    result = r.value ->> 'result',
    error = r.value ->> 'error',
    approved_by = r.value ->> 'approved_by',
    run_after = r.value ->> 'run_after',
    eligible_at = r.value ->> 'eligible_at',
    started_at = r.value ->> 'started_at',
    finished_at = r.value ->> 'finished_at',
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

-- name: lock_claimable
-- The best tasks by (lane, aged priority, eligible_at, seq) are among the first `limit` of each
-- priority level, so ten short index scans replace a sort of the whole queue (R4).
SELECT t.* FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS lv
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
LIMIT :limit

-- name: lock_admissible
SELECT t.* FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS lv
JOIN aq_tasks AS t ON t.seq IN (
    SELECT q.seq FROM aq_tasks AS q
    WHERE q.state = 'pending' AND q.priority = lv.column1
      AND (q.run_after IS NULL OR q.run_after <= :now)
      AND q.depends_on = '[]'
    ORDER BY q.eligible_at, q.seq
    LIMIT :limit)
ORDER BY
    (t.priority <> 0),
    CASE WHEN t.priority = 0 THEN 0
         ELSE max(1, t.priority - (max(0, :now - t.eligible_at) / :aging_us)) END,
    t.eligible_at, t.seq
LIMIT :limit

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
  AND aq_tasks.state = 'executing'
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
