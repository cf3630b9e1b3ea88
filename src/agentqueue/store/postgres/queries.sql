-- Named queries for PostgreSQL (psycopg 3, %(name)s parameters).
-- Bulk statements take one JSON array of row objects: one parameter, one round trip per batch
-- (parsing one JSON document is far cheaper, on both sides, than one typed array per column).

-- name: insert_tasks
WITH ins AS (
    INSERT INTO aq_tasks (id, tenant, source, source_id, title, task_type, payload, priority,
        state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
        requested_by, run_after, eligible_at, created_at, updated_at, event_seq, last_hash,
        hold, state_reason, kind, labels)
    SELECT r.id, r.tenant, r.source, r.source_id, r.title, r.task_type, r.payload, r.priority,
        r.state, r.max_retries, r.timeout_secs, r.assignee,
        ARRAY(SELECT jsonb_array_elements_text(r.depends_on))::uuid[], r.idempotency_key,
        r.callback_url, r.requested_by, r.run_after, r.eligible_at, r.created_at, r.created_at,
        r.event_seq, r.last_hash, r.hold, r.state_reason, COALESCE(r.kind, 'task'),
        COALESCE(r.labels, '[]'::jsonb)
    FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS (id uuid, tenant text,
        source text, source_id text, title text, task_type text, payload jsonb,
        priority smallint, state text, max_retries smallint, timeout_secs integer,
        assignee text, depends_on jsonb, idempotency_key text, callback_url text,
        requested_by text, run_after timestamptz, eligible_at timestamptz,
        created_at timestamptz, event_seq integer, last_hash text, hold text,
        state_reason text, kind text, labels jsonb))
        WITH ORDINALITY AS r(id, tenant, source, source_id, title, task_type, payload, priority,
        state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
        requested_by, run_after, eligible_at, created_at, event_seq, last_hash, hold,
        state_reason, kind, labels, ord)
    ORDER BY r.ord
    ON CONFLICT DO NOTHING
    RETURNING id, seq, state, priority
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT e.e_task_id, e.e_seq, e.e_tenant, e.e_at, e.e_from, e.e_to, e.e_action, e.e_actor,
        e.e_reason, e.e_data::json, e.e_hash
    FROM json_to_recordset(%(events)s::json) AS e(e_task_id uuid, e_seq integer, e_tenant text,
        e_at timestamptz, e_from text, e_to text, e_action text, e_actor text, e_reason text,
        e_data text, e_hash text)
    WHERE e.e_task_id IN (SELECT id FROM ins)
), notified AS (
    -- One NOTIFY per channel for the batch, sent when the statement commits: pending work is
    -- for the scheduler to admit, queued work (admitted as it was submitted) for workers.
    -- A queued P0 task says so ('p0'): a worker with every slot busy may preempt for it.
    SELECT pg_notify(channel, CASE WHEN urgent THEN 'p0' ELSE '' END)
    FROM (SELECT CASE WHEN state = 'queued' THEN 'aq_queued' ELSE 'aq_pending' END,
                 bool_or(state = 'queued' AND priority = 0)
          FROM ins GROUP BY 1) AS c(channel, urgent)
)
-- Selecting the count keeps the planner from dropping the notices as an unused join.
SELECT id, seq, n.sent FROM ins CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n

-- name: apply
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
    RETURNING t.id
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT e.e_task_id, e.e_seq, e.e_tenant, e.e_at, e.e_from, e.e_to, e.e_action, e.e_actor,
        e.e_reason, e.e_data::json, e.e_hash
    FROM json_to_recordset(%(events)s::json) AS e(e_task_id uuid, e_seq integer, e_tenant text,
        e_at timestamptz, e_from text, e_to text, e_action text, e_actor text, e_reason text,
        e_data text, e_hash text)
    WHERE e.e_task_id IN (SELECT id FROM u)
)
SELECT id FROM u

-- name: lock_tasks
SELECT * FROM aq_tasks
WHERE id = ANY(%(ids)s::uuid[]) AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY id
FOR UPDATE

-- name: lock_lapsed
SELECT * FROM aq_tasks
WHERE state = 'executing' AND lease_expires_at <= %(now)s
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: lock_due_retries
SELECT * FROM aq_tasks
WHERE state = 'retrying' AND run_after <= %(now)s
ORDER BY run_after
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: heartbeat
UPDATE aq_tasks t SET
    heartbeat_at = %(now)s,
    lease_expires_at = LEAST(
        %(now)s::timestamptz + make_interval(secs => %(ttl_secs)s),
        t.locked_at + make_interval(secs => t.timeout_secs + %(grace_secs)s))
FROM json_to_recordset(%(rows)s::json) AS v(id uuid, token uuid)
WHERE t.id = v.id AND t.lock_token = v.token AND t.state = 'executing'
RETURNING t.id

-- name: get_tasks
SELECT * FROM aq_tasks
WHERE id = ANY(%(ids)s::uuid[]) AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: find_by_idempotency
SELECT t.* FROM aq_tasks t
JOIN unnest(%(tenant)s::text[], %(key)s::text[]) AS k(tenant, key)
  ON t.tenant = k.tenant AND t.idempotency_key = k.key

-- name: find_live_by_source
SELECT t.* FROM aq_tasks t
JOIN unnest(%(tenant)s::text[], %(source)s::text[], %(source_id)s::text[])
    AS k(tenant, source, source_id)
  ON t.tenant = k.tenant AND t.source = k.source AND t.source_id = k.source_id
WHERE t.state NOT IN ('completed', 'failed', 'cancelled', 'archived')

-- name: list_tasks
SELECT * FROM aq_tasks
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
  AND (%(task_types)s::text[] IS NULL OR task_type = ANY(%(task_types)s::text[]))
  AND (%(sources)s::text[] IS NULL OR source = ANY(%(sources)s::text[]))
  AND (%(before_seq)s::bigint IS NULL OR seq < %(before_seq)s)
ORDER BY seq DESC
LIMIT %(limit)s

-- name: events
SELECT task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data::text AS data,
       hash
FROM aq_events
WHERE task_id = %(task_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY seq

-- name: count_by_state
SELECT state, count(*) FROM aq_tasks
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
GROUP BY state

-- name: count_parked
-- Pending tasks no agent can take, set aside by admission until route_after.
SELECT count(*) AS count FROM aq_tasks
WHERE state = 'pending' AND route_after > %(now)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: task_heads
SELECT id, tenant, event_seq, last_hash, state FROM aq_tasks ORDER BY id

-- name: all_events
SELECT task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data::text AS data,
       hash
FROM aq_events ORDER BY task_id, seq

-- name: create_version_table
CREATE TABLE IF NOT EXISTS aq_schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: applied_versions
SELECT version FROM aq_schema_version

-- name: record_version
INSERT INTO aq_schema_version (version, name) VALUES (%(version)s, %(name)s)
ON CONFLICT DO NOTHING

-- name: migration_lock
SELECT pg_advisory_xact_lock(418387158644)  -- "agent" in hex

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: insert_logs
INSERT INTO aq_task_logs (task_id, tenant, attempt, stream, at, text, truncated)
SELECT * FROM json_to_recordset(%(rows)s::json) AS r(task_id uuid, tenant text,
    attempt integer, stream text, at timestamptz, text text, truncated boolean)

-- name: logs
SELECT task_id, tenant, attempt, stream, at, text, truncated FROM aq_task_logs
WHERE task_id = %(task_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY id

-- name: listen
LISTEN {channel}

-- The hot transitions, applied to a whole batch in one statement each. They implement exactly
-- what domain/states.py decides for ADMIT, CLAIM and COMPLETE (see BULK_ACTIONS there; tests hold
-- the two to the same result), and extend each task's audit chain with aq_event_hash().

-- name: claim
WITH picked AS (
    SELECT t.ctid FROM generate_series(0, 9) AS lv(priority)
    CROSS JOIN LATERAL (
        SELECT ctid, priority, eligible_at, seq FROM aq_tasks
        WHERE state = 'queued' AND priority = lv.priority
          AND (%(task_types)s::text[] IS NULL OR task_type = ANY(%(task_types)s::text[]))
          -- A task routed to an agent goes to that agent's executors only (R14).
          AND (%(agents)s::text[] IS NULL OR agent IS NULL OR agent = ANY(%(agents)s::text[]))
          -- Paused task types come as a parameter: a constant the planner can estimate, so the
          -- scan stays on the partial index, in order, with its LIMIT, statistics or not.
          AND NOT (task_type = ANY(%(paused)s::text[]))
        ORDER BY eligible_at, seq
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) t
    ORDER BY
        (t.priority <> 0),
        CASE WHEN t.priority = 0 THEN 0 ELSE GREATEST(1, t.priority - floor(
            GREATEST(0, extract(epoch FROM (%(now)s::timestamptz - t.eligible_at)))
            / %(aging_secs)s)::integer) END,
        t.eligible_at, t.seq
    LIMIT %(limit)s
), upd AS (
    UPDATE aq_tasks t SET
        state = 'executing',
        lock_token = gen_random_uuid(),
        locked_at = %(now)s,
        heartbeat_at = %(now)s,
        lease_expires_at = %(now)s::timestamptz
            + make_interval(secs => LEAST(%(ttl_secs)s, t.timeout_secs + %(grace_secs)s)),
        assigned_to = %(worker)s,
        started_at = %(now)s,
        state_reason = NULL,
        updated_at = %(now)s,
        event_seq = t.event_seq + 1,
        last_hash = aq_event_hash(t.last_hash, t.id, t.tenant, t.event_seq + 1, %(tail)s)
    -- The guard is the pick: it locked rows it saw queued (re-checked under the lock), so their
    -- ctid is stable and the update is a TID scan, whatever the planner's statistics say.
    WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked))
    RETURNING t.*
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'queued', 'executing', 'claim', %(worker)s, '',
        %(data)s::json, u.last_hash
    FROM upd u
)
SELECT * FROM upd
ORDER BY
    (priority <> 0),
    CASE WHEN priority = 0 THEN 0 ELSE GREATEST(1, priority - floor(
        GREATEST(0, extract(epoch FROM (%(now)s::timestamptz - eligible_at)))
        / %(aging_secs)s)::integer) END,
    eligible_at, seq

-- name: admit
WITH picked AS (
    SELECT t.ctid FROM generate_series(0, 9) AS lv(priority)
    CROSS JOIN LATERAL (
        SELECT ctid, priority, eligible_at, seq FROM aq_tasks
        WHERE state = 'pending' AND priority = lv.priority
          -- eligible_at is max(created, run_after) for pending tasks, so this is "run_after has
          -- passed", as a range on the index instead of a filter over it.
          AND eligible_at <= %(now)s
          -- Paused task types come as a parameter: a constant the planner can estimate, so the
          -- scan stays on the partial index, in order, with its LIMIT, statistics or not.
          AND NOT (task_type = ANY(%(paused)s::text[]))
        ORDER BY eligible_at, seq
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) t
    ORDER BY
        (t.priority <> 0),
        CASE WHEN t.priority = 0 THEN 0 ELSE GREATEST(1, t.priority - floor(
            GREATEST(0, extract(epoch FROM (%(now)s::timestamptz - t.eligible_at)))
            / %(aging_secs)s)::integer) END,
        t.eligible_at, t.seq
    LIMIT %(limit)s
), upd AS (
    UPDATE aq_tasks t SET
        state = 'queued',
        agent = NULL,
        state_reason = NULL,
        updated_at = %(now)s,
        event_seq = t.event_seq + 1,
        last_hash = aq_event_hash(t.last_hash, t.id, t.tenant, t.event_seq + 1, %(tail)s)
    WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked))
    RETURNING t.id, t.tenant, t.event_seq, t.last_hash, t.priority, t.eligible_at, t.seq
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'pending', 'queued', 'admit', %(actor)s, '',
        %(data)s::json, u.last_hash
    FROM upd u
), notified AS (
    -- One NOTIFY for the whole batch, sent when the statement commits ('p0' if it has one).
    SELECT pg_notify('aq_queued', CASE WHEN bool_or(priority = 0) THEN 'p0' ELSE '' END)
    FROM upd HAVING count(*) > 0
)
-- Selecting the count keeps the planner from dropping the notice as an unused join.
SELECT id, n.sent FROM upd CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n
ORDER BY
    (priority <> 0),
    CASE WHEN priority = 0 THEN 0 ELSE GREATEST(1, priority - floor(
        GREATEST(0, extract(epoch FROM (%(now)s::timestamptz - eligible_at)))
        / %(aging_secs)s)::integer) END,
    eligible_at, seq

-- name: complete
-- Fenced: only rows still executing under the reported lock_token are completed.
WITH v AS (
    SELECT * FROM json_to_recordset(%(rows)s::json) AS v(id uuid, token uuid, result jsonb)
), upd AS (
    UPDATE aq_tasks t SET
        state = 'completed',
        result = v.result,
        error = NULL,
        state_reason = NULL,
        finished_at = %(now)s,
        lock_token = NULL,
        locked_at = NULL,
        heartbeat_at = NULL,
        lease_expires_at = NULL,
        assigned_to = NULL,
        updated_at = %(now)s,
        event_seq = t.event_seq + 1,
        last_hash = aq_event_hash(t.last_hash, t.id, t.tenant, t.event_seq + 1, %(tail)s)
    FROM v
    WHERE t.id = v.id AND t.state = 'executing' AND t.lock_token = v.token
    RETURNING t.id, t.tenant, t.event_seq, t.last_hash
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'executing', 'completed', 'complete',
        %(actor)s, '', %(data)s::json, u.last_hash
    FROM upd u
), notified AS (
    -- Tasks waiting on dependencies may be free now, or admission under caps has room again:
    -- wake the scheduler (one notice a batch; for dependencies only while such tasks exist,
    -- one probe of a small partial index).
    SELECT pg_notify('aq_pending', 'completed')
    WHERE EXISTS (SELECT 1 FROM upd)
      AND (%(wake)s OR EXISTS (SELECT 1 FROM aq_tasks
                               WHERE state = 'blocked' AND hold = 'dependencies'))
)
SELECT id, event_seq, last_hash, n.sent FROM upd
CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n

-- name: work_hints
-- What the scheduler steps and claimers would find right now, read cheaply from the partial
-- indexes, so an idle queue costs reads, not write transactions.
SELECT
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'executing' AND lease_expires_at <= %(now)s) AS lapsed,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'retrying' AND run_after <= %(now)s) AS due,
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'pending' AND eligible_at <= %(now)s) AS admissible,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued') AS queued,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'blocked' AND hold = 'dependencies') AS held,
    EXISTS (SELECT 1 FROM aq_tasks
            WHERE state = 'waiting_tool' AND tool_deadline_at <= %(now)s) AS tool_timeouts,
    EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued' AND priority = 0) AS p0_queued

-- Scheduler (R4, R12, R13, R21) ----------------------------------------------------------------

-- name: lead
-- Take or renew the lease of a leadership: it holds when the row is ours or has expired. A new
-- holder starts a new term.
INSERT INTO aq_leader AS l (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES (%(name)s, %(holder)s, 1, %(now)s, %(now)s, %(expires_at)s)
ON CONFLICT (name) DO UPDATE SET
    holder = EXCLUDED.holder,
    term = CASE WHEN l.holder = EXCLUDED.holder THEN l.term ELSE l.term + 1 END,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at
                       ELSE EXCLUDED.acquired_at END,
    renewed_at = EXCLUDED.renewed_at,
    expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= EXCLUDED.renewed_at
RETURNING term

-- name: resign
-- The lease ends now (the row stays, so terms keep counting up).
UPDATE aq_leader SET expires_at = renewed_at WHERE name = %(name)s AND holder = %(holder)s

-- name: leader
SELECT name, holder, term, acquired_at, renewed_at, expires_at FROM aq_leader
WHERE name = %(name)s

-- name: pause
INSERT INTO aq_paused (task_type, paused_at, paused_by, reason)
VALUES (%(task_type)s, %(now)s, %(by)s, %(reason)s)
ON CONFLICT (task_type) DO NOTHING

-- name: resume
DELETE FROM aq_paused WHERE task_type = %(task_type)s RETURNING task_type

-- name: paused
SELECT task_type, paused_at, paused_by, reason FROM aq_paused ORDER BY task_type

-- name: admission_lock
-- Admissions under caps are counted, so they are taken one at a time.
SELECT pg_advisory_xact_lock(418387158645)

-- name: active_load
-- Admitted work (queued or executing), by what the caps are counted over.
SELECT tenant, agent, count(*) AS n FROM aq_tasks
WHERE state IN ('queued', 'executing')
GROUP BY tenant, agent

-- name: preemptible
-- Executing tasks a P0 task may take the slot of (R11), by agent.
SELECT agent, count(*) AS n FROM aq_tasks
WHERE state = 'executing' AND agent IS NOT NULL AND priority >= %(min_priority)s
  AND started_at <= %(before)s
GROUP BY agent

-- name: active_count
SELECT count(*) AS n FROM aq_tasks WHERE state IN ('queued', 'executing')

-- name: pending_tenants
-- Up to %(limit)s tenants with pending work, found by skipping through the index.
WITH RECURSIVE tenants(tenant) AS (
    SELECT (SELECT tenant FROM aq_tasks WHERE state = 'pending' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant FROM aq_tasks t
            WHERE t.state = 'pending' AND t.tenant > tenants.tenant
            ORDER BY t.tenant LIMIT 1)
    FROM tenants WHERE tenants.tenant IS NOT NULL
)
SELECT tenant FROM tenants WHERE tenant IS NOT NULL LIMIT %(limit)s

-- name: admission_candidates
-- The best admissible tasks of the given tenants (see pending_tenants): up to %(per_tenant)s of
-- each priority level of each.
SELECT c.id, c.tenant, c.task_type, c.assignee, c.priority, c.eligible_at, c.seq, c.kind,
    c.labels
FROM unnest(%(tenants)s::text[]) AS tenants(tenant)
CROSS JOIN generate_series(0, 9) AS lv(priority)
CROSS JOIN LATERAL (
    SELECT id, tenant, task_type, assignee, priority, eligible_at, seq, kind, labels
    FROM aq_tasks q
    WHERE q.state = 'pending' AND q.tenant = tenants.tenant AND q.priority = lv.priority
      AND q.eligible_at <= %(now)s
      AND NOT (q.task_type = ANY(%(paused)s::text[]))
      -- A P0 task is read even when its type's agents are full: it may preempt (R11).
      AND NOT (q.task_type = ANY(%(skip_types)s::text[]) AND q.assignee IS NULL
               AND q.priority > 0)
      AND (q.route_after IS NULL OR q.route_after <= %(now)s)
    ORDER BY q.eligible_at, q.seq
    LIMIT %(per_tenant)s
) c

-- name: rate_buckets
SELECT name, tokens, updated_at FROM aq_rate_buckets WHERE name = ANY(%(names)s::text[])
FOR UPDATE

-- name: save_rate_buckets
INSERT INTO aq_rate_buckets (name, tokens, updated_at)
SELECT * FROM json_to_recordset(%(rows)s::json)
    AS r(name text, tokens double precision, updated_at timestamptz)
ON CONFLICT (name) DO UPDATE SET tokens = EXCLUDED.tokens, updated_at = EXCLUDED.updated_at

-- name: admit_ids
-- ADMIT the chosen tasks that are still pending (the set-wise form of decide(ADMIT), as in
-- `admit`, for ids the admission planner picked).
WITH upd AS (
    UPDATE aq_tasks t SET
        state = 'queued',
        agent = %(agent)s,
        state_reason = NULL,
        updated_at = %(now)s,
        event_seq = t.event_seq + 1,
        last_hash = aq_event_hash(t.last_hash, t.id, t.tenant, t.event_seq + 1, %(tail)s)
    WHERE t.id = ANY(%(ids)s::uuid[]) AND t.state = 'pending' AND t.eligible_at <= %(now)s
    RETURNING t.id, t.tenant, t.event_seq, t.last_hash, t.priority
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'pending', 'queued', 'admit', %(actor)s, '',
        %(data)s::json, u.last_hash
    FROM upd u
), notified AS (
    -- Workers hear of it when the transaction commits ('p0' if it has one).
    SELECT pg_notify('aq_queued', CASE WHEN bool_or(priority = 0) THEN 'p0' ELSE '' END)
    FROM upd HAVING count(*) > 0
)
SELECT id, n.sent FROM upd CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n

-- name: lock_dependents_ready
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
SELECT id, state FROM aq_tasks WHERE id = ANY(%(ids)s::uuid[])

-- Dead letter retention and alerts

-- name: enqueue_outbox
INSERT INTO aq_outbox (kind, task_id, event_seq, tenant, url, body, next_attempt_at,
    created_at)
SELECT r.kind, r.task_id, r.event_seq, r.tenant, r.url, r.body::jsonb, r.created_at,
    r.created_at
FROM json_to_recordset(%(rows)s::json) AS r(kind text, task_id uuid, event_seq integer,
    tenant text, url text, body text, created_at timestamptz)
ON CONFLICT DO NOTHING
RETURNING id

-- name: lease_outbox
-- A row another deliverer has picked is skipped; once it commits, the row is not due any more.
UPDATE aq_outbox SET next_attempt_at = %(until)s
WHERE id IN (
    SELECT id FROM aq_outbox
    WHERE kind = %(kind)s AND delivered_at IS NULL AND next_attempt_at <= %(now)s
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id, kind, task_id, event_seq, tenant, url, body, attempts, created_at

-- name: record_deliveries
UPDATE aq_outbox o SET
    attempts = o.attempts + 1,
    delivered_at = r.delivered_at,
    last_error = coalesce(r.error, o.last_error),
    next_attempt_at = coalesce(r.next_attempt_at, o.next_attempt_at)
FROM json_to_recordset(%(rows)s::json) AS r(id bigint, delivered_at timestamptz, error text,
    next_attempt_at timestamptz)
WHERE o.id = r.id AND o.delivered_at IS NULL

-- name: lock_expired_dead_letters
SELECT * FROM aq_tasks
WHERE state = 'dead_letter' AND updated_at <= %(latest)s
  AND updated_at <= CASE WHEN priority = 0 THEN %(p0_before)s::timestamptz
                         ELSE %(other_before)s::timestamptz END
ORDER BY updated_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: purge
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

-- Cron schedules

-- name: insert_schedule
INSERT INTO aq_schedules (tenant, name, cron, tz, task, catch_up, next_at, created_by,
    created_at, updated_at)
VALUES (%(tenant)s, %(name)s, %(cron)s, %(tz)s, %(task)s::jsonb, %(catch_up)s, %(next_at)s,
    %(created_by)s, %(now)s, %(now)s)
ON CONFLICT (tenant, name) DO NOTHING
RETURNING *

-- name: list_schedules
SELECT * FROM aq_schedules
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY tenant, name

-- name: delete_schedule
DELETE FROM aq_schedules WHERE tenant = %(tenant)s AND name = %(name)s
RETURNING *

-- name: due_schedules
-- Served by aq_schedules_due: when nothing is due this reads one index entry.
SELECT * FROM aq_schedules WHERE next_at <= %(now)s ORDER BY next_at LIMIT %(limit)s

-- name: advance_schedule
-- Guarded by the slot read: of several schedulers handling the same slot, one moves it on.
UPDATE aq_schedules SET
    next_at = %(next_at)s,
    last_slot_at = COALESCE(%(last_slot_at)s::timestamptz, last_slot_at),
    last_fired_at = CASE WHEN %(last_slot_at)s::timestamptz IS NULL THEN last_fired_at
                         ELSE %(now)s END,
    updated_at = %(now)s
WHERE tenant = %(tenant)s AND name = %(name)s AND next_at = %(expected)s

-- Waiting on tools (R9) --------------------------------------------------------------------

-- name: save_checkpoint
-- Fenced like every executor write: only while the lease holds. Progress, not a change of state:
-- no event (the checkpoint is recorded with the next change).
UPDATE aq_tasks SET checkpoint = %(checkpoint)s::jsonb
WHERE id = %(id)s AND state = 'executing' AND lock_token = %(token)s
RETURNING id

-- name: lock_tool_timeouts
SELECT * FROM aq_tasks
WHERE state = 'waiting_tool' AND tool_deadline_at <= %(now)s
ORDER BY tool_deadline_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: lock_tool_work
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
UPDATE aq_tasks SET tool_calls = %(tool_calls)s::jsonb
WHERE id = %(id)s AND state = 'waiting_tool' AND event_seq = %(expected_seq)s
RETURNING id

-- name: note_waiting
-- Why pending tasks wait (no agent can take them): shown by `show`, not a change of state.
-- Until %(until)s admission passes them by, so they never hold the window others wait behind.
UPDATE aq_tasks t SET state_reason = r.reason, route_after = %(until)s
FROM json_to_recordset(%(rows)s::json) AS r(id uuid, reason text)
WHERE t.id = r.id AND t.state = 'pending'

-- name: queued_p0
-- Who the queued P0 tasks are for (the agent they were routed to, and their type): a busy worker
-- preempts only a task of an executor that could run one of them (R11).
SELECT DISTINCT agent, task_type FROM (
    SELECT agent, task_type FROM aq_tasks WHERE state = 'queued' AND priority = 0 LIMIT %(limit)s
) AS p0
