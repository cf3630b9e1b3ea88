-- Tasks: insert, guarded changes, locks and reads (PostgreSQL: psycopg 3, %(name)s parameters).
-- Bulk statements take one JSON array of row objects: one parameter, one round trip per batch
-- (parsing one JSON document is far cheaper, on both sides, than one typed array per column).

-- name: insert_tasks
-- Insert new tasks, skipping any a uniqueness rule refuses; returns the id and seq of each inserted.
WITH ins AS (
    INSERT INTO aq_tasks (id, tenant, source, source_id, title, task_type, payload, priority,
        state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
        requested_by, run_after, eligible_at, created_at, updated_at, event_seq, last_hash,
        hold, state_reason, kind, labels, traceparent, in_reply_to)
    SELECT r.id, r.tenant, r.source, r.source_id, r.title, r.task_type, r.payload, r.priority,
        r.state, r.max_retries, r.timeout_secs, r.assignee,
        ARRAY(SELECT jsonb_array_elements_text(r.depends_on))::uuid[], r.idempotency_key,
        r.callback_url, r.requested_by, r.run_after, r.eligible_at, r.created_at, r.created_at,
        r.event_seq, r.last_hash, r.hold, r.state_reason, COALESCE(r.kind, 'task'),
        COALESCE(r.labels, '[]'::jsonb), r.traceparent, r.in_reply_to
    FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS (id uuid, tenant text,
        source text, source_id text, title text, task_type text, payload jsonb,
        priority smallint, state text, max_retries smallint, timeout_secs integer,
        assignee text, depends_on jsonb, idempotency_key text, callback_url text,
        requested_by text, run_after timestamptz, eligible_at timestamptz,
        created_at timestamptz, event_seq integer, last_hash text, hold text,
        state_reason text, kind text, labels jsonb, traceparent text, in_reply_to uuid))
        WITH ORDINALITY AS r(id, tenant, source, source_id, title, task_type, payload, priority,
        state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
        requested_by, run_after, eligible_at, created_at, event_seq, last_hash, hold,
        state_reason, kind, labels, traceparent, in_reply_to, ord)
    ORDER BY r.ord
    ON CONFLICT DO NOTHING
    RETURNING id, seq, state, priority, last_hash,
        -- The row as written, signed with its head event (R24).
        aq_row_mac(last_hash, state, priority, payload::text, result::text, assigned_to,
                   approved_by, retry_count) AS row_mac
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash, row_mac)
    SELECT e.e_task_id, e.e_seq, e.e_tenant, e.e_at, e.e_from, e.e_to, e.e_action, e.e_actor,
        e.e_reason, e.e_data::json, e.e_hash,
        CASE WHEN i.last_hash = e.e_hash THEN i.row_mac END
    FROM json_to_recordset(%(events)s::json) AS e(e_task_id uuid, e_seq integer, e_tenant text,
        e_at timestamptz, e_from text, e_to text, e_action text, e_actor text, e_reason text,
        e_data text, e_hash text)
    JOIN ins i ON i.id = e.e_task_id
), notified AS (
    -- One NOTIFY per channel for the batch, sent when the statement commits: pending work is
    -- for the scheduler to admit (or, under a global cap alone, for the claims), queued work
    -- (admitted as it was submitted) for workers. A P0 task says so ('p0'): a worker with
    -- every slot busy may preempt for it.
    SELECT pg_notify(channel, CASE WHEN urgent THEN 'p0' ELSE '' END)
    FROM (SELECT CASE WHEN state = 'queued' THEN 'aq_queued' ELSE 'aq_pending' END,
                 bool_or(priority = 0)
          FROM ins GROUP BY 1) AS c(channel, urgent)
)
-- Selecting the count keeps the planner from dropping the notices as an unused join.
SELECT id, seq, n.sent FROM ins CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n

-- name: apply
-- Write decided changes, each guarded by its expected state and audit position; returns the ids written.
-- Each row of %(rows)s names a task, its guard (expected state and audit position) and only the
-- columns the change sets: a key that is absent leaves its column alone.
WITH v AS (
    SELECT d FROM jsonb_array_elements(%(rows)s::jsonb) AS d
), u AS (
    UPDATE aq_tasks t SET
        state = v.d ->> 'state',
        state_reason = CASE WHEN v.d ? 'state_reason' THEN v.d ->> 'state_reason' ELSE t.state_reason END,
        priority = CASE WHEN v.d ? 'priority' THEN (v.d ->> 'priority')::smallint ELSE t.priority END,
        retry_count = CASE WHEN v.d ? 'retry_count' THEN (v.d ->> 'retry_count')::smallint ELSE t.retry_count END,
        lock_token = CASE WHEN v.d ? 'lock_token' THEN (v.d ->> 'lock_token')::uuid ELSE t.lock_token END,
        locked_at = CASE WHEN v.d ? 'locked_at' THEN (v.d ->> 'locked_at')::timestamptz ELSE t.locked_at END,
        heartbeat_at = CASE WHEN v.d ? 'heartbeat_at' THEN (v.d ->> 'heartbeat_at')::timestamptz ELSE t.heartbeat_at END,
        lease_expires_at = CASE WHEN v.d ? 'lease_expires_at' THEN (v.d ->> 'lease_expires_at')::timestamptz ELSE t.lease_expires_at END,
        assignee = CASE WHEN v.d ? 'assignee' THEN v.d ->> 'assignee' ELSE t.assignee END,
        assigned_to = CASE WHEN v.d ? 'assigned_to' THEN v.d ->> 'assigned_to' ELSE t.assigned_to END,
        checkpoint = CASE WHEN v.d ? 'checkpoint' THEN NULLIF(v.d -> 'checkpoint', 'null'::jsonb) ELSE t.checkpoint END,
        tool_calls = CASE WHEN v.d ? 'tool_calls' THEN v.d -> 'tool_calls' ELSE t.tool_calls END,
        result = CASE WHEN v.d ? 'result' THEN NULLIF(v.d -> 'result', 'null'::jsonb) ELSE t.result END,
        error = CASE WHEN v.d ? 'error' THEN v.d ->> 'error' ELSE t.error END,
        approved_by = CASE WHEN v.d ? 'approved_by' THEN v.d ->> 'approved_by' ELSE t.approved_by END,
        run_after = CASE WHEN v.d ? 'run_after' THEN (v.d ->> 'run_after')::timestamptz ELSE t.run_after END,
        eligible_at = CASE WHEN v.d ? 'eligible_at' THEN (v.d ->> 'eligible_at')::timestamptz ELSE t.eligible_at END,
        started_at = CASE WHEN v.d ? 'started_at' THEN (v.d ->> 'started_at')::timestamptz ELSE t.started_at END,
        finished_at = CASE WHEN v.d ? 'finished_at' THEN (v.d ->> 'finished_at')::timestamptz ELSE t.finished_at END,
        hold = CASE WHEN v.d ? 'hold' THEN v.d ->> 'hold' ELSE t.hold END,
        tool_deadline_at = CASE WHEN v.d ? 'tool_deadline_at' THEN (v.d ->> 'tool_deadline_at')::timestamptz ELSE t.tool_deadline_at END,
        agent = CASE WHEN v.d ? 'agent' THEN v.d ->> 'agent' ELSE t.agent END,
        updated_at = (v.d ->> 'updated_at')::timestamptz,
        event_seq = (v.d ->> 'event_seq')::integer,
        last_hash = v.d ->> 'last_hash'
    FROM v
    WHERE t.id = (v.d ->> 'id')::uuid
      AND t.state = v.d ->> 'expected_state'
      AND t.event_seq = (v.d ->> 'expected_seq')::integer
    RETURNING t.id, t.last_hash,
        -- The row as updated, signed with its head event (R24).
        aq_row_mac(t.last_hash, t.state, t.priority, t.payload::text, t.result::text,
                   t.assigned_to, t.approved_by, t.retry_count) AS row_mac
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash, row_mac)
    SELECT e.e_task_id, e.e_seq, e.e_tenant, e.e_at, e.e_from, e.e_to, e.e_action, e.e_actor,
        e.e_reason, e.e_data::json, e.e_hash,
        CASE WHEN x.last_hash = e.e_hash THEN x.row_mac END
    FROM json_to_recordset(%(events)s::json) AS e(e_task_id uuid, e_seq integer, e_tenant text,
        e_at timestamptz, e_from text, e_to text, e_action text, e_actor text, e_reason text,
        e_data text, e_hash text)
    JOIN u x ON x.id = e.e_task_id
)
SELECT id FROM u

-- name: lock_tasks
-- The tasks with these ids (in a tenant, if given), locked until commit.
SELECT * FROM aq_tasks
WHERE id = ANY(%(ids)s::uuid[]) AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY id
FOR UPDATE

-- name: lock_lapsed
-- Executing tasks whose lease has run out, locked, oldest lease first.
SELECT * FROM aq_tasks
WHERE state = 'executing' AND lease_expires_at <= %(now)s
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: lock_due_retries
-- Retrying tasks whose backoff has elapsed, locked, earliest first.
SELECT * FROM aq_tasks
WHERE state = 'retrying' AND run_after <= %(now)s
ORDER BY run_after
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: get_tasks
-- The tasks with these ids (in a tenant, if given).
SELECT * FROM aq_tasks
WHERE id = ANY(%(ids)s::uuid[]) AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: replies
-- The replies to any of these tasks (in_reply_to), oldest first.
SELECT * FROM aq_tasks
WHERE tenant = %(tenant)s AND in_reply_to = ANY(%(ids)s::uuid[])
ORDER BY created_at, seq

-- name: find_by_idempotency
-- Tasks sharing a (tenant, idempotency key) with any of the keys given.
SELECT t.* FROM aq_tasks t
JOIN json_to_recordset(%(keys)s::json) AS k(tenant text, key text)
  ON t.tenant = k.tenant AND t.idempotency_key = k.key

-- name: find_live_by_source
-- Live tasks sharing a (tenant, source, source id) with any of the keys given.
SELECT t.* FROM aq_tasks t
JOIN json_to_recordset(%(keys)s::json) AS k(tenant text, source text, source_id text)
  ON t.tenant = k.tenant AND t.source = k.source AND t.source_id = k.source_id
WHERE t.state NOT IN ('completed', 'failed', 'cancelled', 'archived')

-- name: list_tasks
-- Tasks matching a filter, newest first.
SELECT * FROM aq_tasks
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
  AND (%(task_types)s::text[] IS NULL OR task_type = ANY(%(task_types)s::text[]))
  AND (%(sources)s::text[] IS NULL OR source = ANY(%(sources)s::text[]))
  AND (%(source_id)s::text IS NULL OR source_id = %(source_id)s)
  AND (%(assignee)s::text IS NULL OR assignee = %(assignee)s)
  AND (%(agent)s::text IS NULL OR agent = %(agent)s)
  -- Text anywhere in the title or the source id, whatever its case.
  AND (%(text)s::text IS NULL OR strpos(lower(title), lower(%(text)s)) > 0
       OR strpos(lower(coalesce(source_id, '')), lower(%(text)s)) > 0)
  -- Every label asked for (a JSON array) is among the task's: jsonb containment.
  AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
  AND (%(created_after)s::timestamptz IS NULL OR created_at >= %(created_after)s)
  AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s)
  AND (%(before_seq)s::bigint IS NULL OR seq < %(before_seq)s)
ORDER BY seq DESC
LIMIT %(limit)s

-- name: events
-- The audit events of one task, in order, data as stored text.
SELECT task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data::text AS data,
       hash
FROM aq_events
WHERE task_id = %(task_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY seq

-- name: count_by_state
-- How many tasks are in each state.
SELECT state, count(*) FROM aq_tasks
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
GROUP BY state

-- name: count_parked
-- How many pending tasks admission has set aside for now.
-- Pending tasks no agent can take, set aside by admission until route_after.
SELECT count(*) AS count FROM aq_tasks
WHERE state = 'pending' AND route_after > %(now)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: insert_logs
-- Keep captured output with its task, from a JSON document.
INSERT INTO aq_task_logs (task_id, tenant, attempt, stream, at, text, truncated)
SELECT * FROM json_to_recordset(%(rows)s::json) AS r(task_id uuid, tenant text,
    attempt integer, stream text, at timestamptz, text text, truncated boolean)

-- name: logs
-- Captured output of one task, oldest first.
SELECT task_id, tenant, attempt, stream, at, text, truncated FROM aq_task_logs
WHERE task_id = %(task_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY id

-- name: work_hints
-- Whether each kind of work exists right now, one flag a column.
-- What the scheduler steps and claimers would find right now, read cheaply from the partial
-- indexes, so an idle queue costs reads, not write transactions. Pending and queued are asked
-- in their index's order (a first row, not EXISTS): statistics taken with the queue full call
-- those states common, and an EXISTS then walks the table from its front, past every task
-- finished since (a median of 1.7 ms a read in a capped drain of 20,000, read at every
-- scheduler pass: benchmarks/statement_log.py); the index's front costs the entries not yet
-- vacuumed.
SELECT
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'executing' AND lease_expires_at <= %(now)s) AS lapsed,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'retrying' AND run_after <= %(now)s) AS due,
    (SELECT true FROM aq_tasks WHERE state = 'pending' AND eligible_at <= %(now)s
     ORDER BY priority, eligible_at, seq LIMIT 1) IS NOT NULL AS admissible,
    (SELECT true FROM aq_tasks WHERE state = 'queued'
     ORDER BY priority, eligible_at, seq LIMIT 1) IS NOT NULL AS queued,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'blocked' AND hold = 'dependencies') AS held,
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'waiting_tool' AND tool_deadline_at <= %(now)s) AS tool_timeouts,
    (SELECT true FROM aq_tasks WHERE state = 'queued' AND priority = 0
     ORDER BY priority, eligible_at, seq LIMIT 1) IS NOT NULL AS p0_queued,
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
        SELECT 1 FROM unnest(t.depends_on) AS dep(id)
        LEFT JOIN aq_tasks d ON d.id = dep.id
        WHERE d.state IS DISTINCT FROM 'completed')
    OR EXISTS (
        SELECT 1 FROM unnest(t.depends_on) AS dep(id)
        LEFT JOIN aq_tasks d ON d.id = dep.id
        WHERE d.id IS NULL OR d.state IN ('failed', 'cancelled', 'dead_letter', 'archived'))
  )
ORDER BY t.seq
LIMIT %(limit)s
FOR UPDATE OF t SKIP LOCKED

-- name: task_states
-- The current state of each task among these ids.
SELECT id, state FROM aq_tasks WHERE id = ANY(%(ids)s::uuid[])
