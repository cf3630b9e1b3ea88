-- Named queries for SQLite (sqlite3, :name parameters).
-- Times are integer microseconds. Bulk statements take one JSON array of row objects
-- (:rows) and read it with json_each: one statement per batch. JSON columns travel as
-- strings inside those objects so the stored text is exactly what was sent.

-- name: insert_tasks
INSERT INTO aq_tasks (id, tenant, source, source_id, title, task_type, payload, priority,
    state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
    requested_by, run_after, eligible_at, created_at, updated_at, event_seq, last_hash, hold,
    state_reason, kind, labels)
SELECT r.value ->> 'id', r.value ->> 'tenant', r.value ->> 'source', r.value ->> 'source_id',
    r.value ->> 'title', r.value ->> 'task_type', r.value ->> 'payload', r.value ->> 'priority',
    r.value ->> 'state', r.value ->> 'max_retries', r.value ->> 'timeout_secs',
    r.value ->> 'assignee', r.value ->> 'depends_on', r.value ->> 'idempotency_key',
    r.value ->> 'callback_url', r.value ->> 'requested_by', r.value ->> 'run_after',
    r.value ->> 'eligible_at', r.value ->> 'created_at', r.value ->> 'created_at',
    r.value ->> 'event_seq', r.value ->> 'last_hash', r.value ->> 'hold',
    r.value ->> 'state_reason', coalesce(r.value ->> 'kind', 'task'),
    coalesce(r.value ->> 'labels', '[]')
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

-- name: count_parked
-- Pending tasks no agent can take, set aside by admission until route_after.
SELECT count(*) AS count FROM aq_tasks
WHERE state = 'pending' AND route_after > :now AND (:tenant IS NULL OR tenant = :tenant)

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
          -- A task routed to an agent goes to that agent's executors only (R14).
          AND (:agents IS NULL OR q.agent IS NULL
               OR q.agent IN (SELECT value FROM json_each(:agents)))
          AND q.task_type NOT IN (SELECT value FROM json_each(:paused))
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
    agent = NULL,
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
          AND q.task_type NOT IN (SELECT value FROM json_each(:paused))
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
            WHERE state = 'pending' AND eligible_at <= :now) AS admissible,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued') AS queued,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'blocked' AND hold = 'dependencies') AS held,
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'waiting_tool' AND tool_deadline_at <= :now) AS tool_timeouts,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued' AND priority = 0) AS p0_queued

-- Scheduler (R4, R12, R13, R21) ----------------------------------------------------------------

-- name: lead
-- Take or renew the lease of a leadership: it holds when the row is ours or has expired. A new
-- holder starts a new term.
INSERT INTO aq_leader AS l (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES (:name, :holder, 1, :now, :now, :expires_at)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    term = CASE WHEN l.holder = excluded.holder THEN l.term ELSE l.term + 1 END,
    acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at
                       ELSE excluded.acquired_at END,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at
WHERE l.holder = excluded.holder OR l.expires_at <= excluded.renewed_at
RETURNING term

-- name: resign
-- The lease ends now (the row stays, so terms keep counting up).
UPDATE aq_leader SET expires_at = renewed_at WHERE name = :name AND holder = :holder

-- name: leader
SELECT name, holder, term, acquired_at, renewed_at, expires_at FROM aq_leader
WHERE name = :name

-- name: pause
INSERT INTO aq_paused (task_type, paused_at, paused_by, reason)
VALUES (:task_type, :now, :by, :reason)
ON CONFLICT (task_type) DO NOTHING

-- name: resume
DELETE FROM aq_paused WHERE task_type = :task_type

-- name: paused
SELECT task_type, paused_at, paused_by, reason FROM aq_paused ORDER BY task_type

-- name: active_load
-- Admitted work (queued or executing), by what the caps are counted over.
SELECT tenant, agent, count(*) AS n FROM aq_tasks
WHERE state IN ('queued', 'executing')
GROUP BY tenant, agent

-- name: preemptible
-- Executing tasks a P0 task may take the slot of (R11), by agent.
SELECT agent, count(*) AS n FROM aq_tasks
WHERE state = 'executing' AND agent IS NOT NULL AND priority >= :min_priority
  AND started_at <= :before
GROUP BY agent

-- name: active_count
SELECT count(*) AS n FROM aq_tasks WHERE state IN ('queued', 'executing')

-- name: pending_tenants
-- Up to :limit tenants with pending work, found by skipping through the index.
WITH RECURSIVE tenants(tenant) AS (
    SELECT (SELECT tenant FROM aq_tasks WHERE state = 'pending' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant FROM aq_tasks t
            WHERE t.state = 'pending' AND t.tenant > tenants.tenant
            ORDER BY t.tenant LIMIT 1)
    FROM tenants WHERE tenants.tenant IS NOT NULL
)
SELECT tenant FROM tenants WHERE tenant IS NOT NULL LIMIT :limit

-- name: admission_candidates
-- The best admissible tasks of the given tenants (see pending_tenants): up to :per_tenant of
-- each priority level of each.
SELECT c.id, c.tenant, c.task_type, c.assignee, c.priority, c.eligible_at, c.seq, c.kind,
    c.labels
FROM (SELECT value AS tenant FROM json_each(:tenants)) AS tenants
JOIN (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS lv
JOIN aq_tasks AS c ON c.seq IN (
    SELECT q.seq FROM aq_tasks AS q
    WHERE q.state = 'pending' AND q.tenant = tenants.tenant AND q.priority = lv.column1
      AND q.eligible_at <= :now
      AND q.task_type NOT IN (SELECT value FROM json_each(:paused))
      -- A P0 task is read even when its type's agents are full: it may preempt (R11).
      AND NOT (q.task_type IN (SELECT value FROM json_each(:skip_types)) AND q.assignee IS NULL
               AND q.priority > 0)
      AND (q.route_after IS NULL OR q.route_after <= :now)
    ORDER BY q.eligible_at, q.seq
    LIMIT :per_tenant)

-- name: rate_buckets
SELECT name, tokens, updated_at FROM aq_rate_buckets
WHERE name IN (SELECT value FROM json_each(:names))

-- name: save_rate_buckets
INSERT INTO aq_rate_buckets (name, tokens, updated_at)
SELECT r.value ->> 'name', r.value ->> 'tokens', r.value ->> 'updated_at'
FROM json_each(:rows) AS r
WHERE true
ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at

-- name: admit_ids
-- ADMIT the chosen tasks that are still pending (the set-wise form of decide(ADMIT), as in
-- `admit`, for ids the admission planner picked).
UPDATE aq_tasks SET
    state = 'queued',
    agent = :agent,
    state_reason = NULL,
    updated_at = :now,
    event_seq = event_seq + 1,
    last_hash = aq_event_hash(last_hash, id, tenant, event_seq + 1, :tail)
WHERE id IN (SELECT value FROM json_each(:ids))
  AND +state = 'pending' AND eligible_at <= :now
RETURNING id

-- name: lock_dependents_ready
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
SELECT id, state FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:ids))

-- Dead letter retention and alerts

-- name: enqueue_outbox
INSERT INTO aq_outbox (kind, task_id, event_seq, tenant, url, body, next_attempt_at,
    created_at)
SELECT r.value ->> 'kind', r.value ->> 'task_id', r.value ->> 'event_seq',
    r.value ->> 'tenant', r.value ->> 'url', r.value ->> 'body', r.value ->> 'created_at',
    r.value ->> 'created_at'
FROM json_each(:rows) AS r
WHERE true
ON CONFLICT DO NOTHING
RETURNING id

-- name: lease_outbox
-- The writer lock of BEGIN IMMEDIATE makes the pick and the push one step for every process.
UPDATE aq_outbox SET next_attempt_at = :until
WHERE id IN (
    SELECT id FROM aq_outbox
    WHERE kind = :kind AND delivered_at IS NULL AND next_attempt_at <= :now
    ORDER BY next_attempt_at, id
    LIMIT :limit)
RETURNING id, kind, task_id, event_seq, tenant, url, body, attempts, created_at

-- name: record_deliveries
UPDATE aq_outbox SET
    attempts = attempts + 1,
    delivered_at = r.value ->> 'delivered_at',
    last_error = coalesce(r.value ->> 'error', last_error),
    next_attempt_at = coalesce(r.value ->> 'next_attempt_at', next_attempt_at)
FROM json_each(:rows) AS r
WHERE aq_outbox.id = r.value ->> 'id' AND aq_outbox.delivered_at IS NULL

-- name: lock_expired_dead_letters
SELECT * FROM aq_tasks
WHERE state = 'dead_letter' AND updated_at <= :latest
  AND updated_at <= CASE WHEN priority = 0 THEN :p0_before ELSE :other_before END
ORDER BY updated_at
LIMIT :limit

-- name: purge_tasks
DELETE FROM aq_tasks
WHERE id IN (SELECT r.value ->> 'id' FROM json_each(:rows) AS r)
  AND state = 'dead_letter'
  AND event_seq = (SELECT r.value ->> 'expected_seq' FROM json_each(:rows) AS r
                   WHERE r.value ->> 'id' = aq_tasks.id)
RETURNING id

-- name: purge_logs
DELETE FROM aq_task_logs WHERE task_id IN (SELECT value FROM json_each(:ids))

-- Cron schedules

-- name: insert_schedule
INSERT INTO aq_schedules (tenant, name, cron, tz, task, catch_up, next_at, created_by,
    created_at, updated_at)
VALUES (:tenant, :name, :cron, :tz, :task, :catch_up, :next_at, :created_by, :now, :now)
ON CONFLICT (tenant, name) DO NOTHING
RETURNING *

-- name: list_schedules
SELECT * FROM aq_schedules WHERE (:tenant IS NULL OR tenant = :tenant) ORDER BY tenant, name

-- name: delete_schedule
DELETE FROM aq_schedules WHERE tenant = :tenant AND name = :name
RETURNING *

-- name: due_schedules
-- Served by aq_schedules_due: when nothing is due this reads one index entry.
SELECT * FROM aq_schedules WHERE next_at <= :now ORDER BY next_at LIMIT :limit

-- name: advance_schedule
-- Guarded by the slot read: of several schedulers handling the same slot, one moves it on.
UPDATE aq_schedules SET
    next_at = :next_at,
    last_slot_at = coalesce(:last_slot_at, last_slot_at),
    last_fired_at = CASE WHEN :last_slot_at IS NULL THEN last_fired_at ELSE :now END,
    updated_at = :now
WHERE tenant = :tenant AND name = :name AND next_at = :expected

-- Waiting on tools (R9) --------------------------------------------------------------------

-- name: save_checkpoint
-- Fenced like every executor write: only while the lease holds. Progress, not a change of state:
-- no event (the checkpoint is recorded with the next change).
UPDATE aq_tasks SET checkpoint = :checkpoint
WHERE id = :id AND +state = 'executing' AND lock_token = :token
RETURNING id

-- name: lock_tool_timeouts
SELECT * FROM aq_tasks
WHERE state = 'waiting_tool' AND tool_deadline_at <= :now
ORDER BY tool_deadline_at
LIMIT :limit

-- name: lock_tool_work
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
UPDATE aq_tasks SET tool_calls = :tool_calls
WHERE id = :id AND +state = 'waiting_tool' AND event_seq = :expected_seq
RETURNING id

-- name: note_waiting
-- Why pending tasks wait (no agent can take them): shown by `show`, not a change of state.
-- Until :until admission passes them by, so they never hold the window others wait behind.
UPDATE aq_tasks SET route_after = :until, state_reason = (
    SELECT r.value ->> 'reason' FROM json_each(:rows) AS r WHERE r.value ->> 'id' = aq_tasks.id)
WHERE id IN (SELECT r.value ->> 'id' FROM json_each(:rows) AS r)
  AND state = 'pending'

-- name: queued_p0
-- Who the queued P0 tasks are for (the agent they were routed to, and their type): a busy worker
-- preempts only a task of an executor that could run one of them (R11).
SELECT DISTINCT agent, task_type FROM (
    SELECT agent, task_type FROM aq_tasks WHERE state = 'queued' AND priority = 0 LIMIT :limit
) AS p0
