-- Admission (R4, R12): ADMIT set-wise, and what admission under limits counts (PostgreSQL).
-- ADMIT is applied to a whole batch in one statement, implementing exactly what domain/states.py
-- decides (BULK_ACTIONS), and extends each task's audit chain with aq_event_hash().

-- name: admit
-- ADMIT the best admissible pending tasks, set-wise, up to the limit; returns their ids.
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
    RETURNING t.id, t.tenant, t.event_seq, t.last_hash, t.priority, t.eligible_at, t.seq,
        -- The row as updated, signed with its head event (R24).
        aq_row_mac(t.last_hash, t.state, t.priority, t.payload::text, t.result::text,
                   t.assigned_to, t.approved_by, t.retry_count) AS row_mac
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash, row_mac)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'pending', 'queued', 'admit', %(actor)s, '',
        %(data)s::json, u.last_hash, u.row_mac
    FROM upd u
), counted AS (
    -- The depth of these events (pending to queued), as aq_metrics_rollup counts it (migration
    -- 0021).
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, u.tenant, '', '', 'depth', d.state, sum(d.delta), 0
    FROM upd u CROSS JOIN (VALUES ('pending', -1), ('queued', 1)) AS d(state, delta)
    GROUP BY u.tenant, d.state
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total
), notified AS (
    -- One NOTIFY for the whole batch, sent when the statement commits ('p0' if it has one).
    SELECT pg_notify('aq_queued', CASE WHEN bool_or(priority = 0) THEN 'p0' ELSE '' END)
    FROM upd HAVING count(*) > 0
)
-- Selecting the count keeps the planner from dropping the notice as an unused join; the
-- mark says this statement counted its events (see execution.sql, claim).
SELECT id, n.sent FROM upd CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n
CROSS JOIN (SELECT set_config('agentqueue.counted', 'on', true)) AS counted_mark
ORDER BY
    (priority <> 0),
    CASE WHEN priority = 0 THEN 0 ELSE GREATEST(1, priority - floor(
        GREATEST(0, extract(epoch FROM (%(now)s::timestamptz - eligible_at)))
        / %(aging_secs)s)::integer) END,
    eligible_at, seq

-- name: admission_lock
-- Take the one turn to admit under limits, until commit; relaxed, that commit does not wait.
-- Admissions under caps are counted, so they are taken one at a time. A relaxed admission's
-- commit does not wait for its WAL to reach the disk (synchronous_commit off, for this
-- transaction only: set_config's third argument): an admission a server crash loses leaves its
-- tasks pending, to be admitted again, with their events and rate tokens (one transaction), and
-- any later commit that waits (the claim of what was admitted, among others) makes it durable
-- too, as the WAL is flushed in order. An admission that may claim (a worker's own scheduler
-- hands over to its claimer) is not relaxed: its claims start attempts as it commits, so its
-- commit waits as every claim's does, under the server's own setting, with no statement more.
SELECT pg_advisory_xact_lock(418387158645),
    CASE WHEN %(relaxed)s THEN set_config('synchronous_commit', 'off', true) END

-- name: commit_durably
-- Make this transaction's commit wait for the disk after all: it claimed tasks.
-- A relaxed admission that claims after all starts attempts as it commits; those must not be
-- lost to a crash, so its commit waits like every claim's.
SELECT set_config('synchronous_commit', 'on', true)

-- name: fixed_plan
-- Plan the next statement once per connection, in a fixed shape (see fixed_plan_back).
-- The admission's candidates are read at every pass, and PostgreSQL plans a statement afresh
-- for its values whenever its generic plan looks dearer: for the candidates, at every pass
-- (0.3 to 0.75 ms of a 0.4 to 0.9 ms statement, by the server's log on two machines). Their generic plan supposes one task a priority
-- level, and would read a whole level in a bitmap scan and sort it (hundreds of milliseconds
-- with many tasks pending) and compile itself with JIT; with sorts and bitmap scans priced out
-- and JIT off it walks the pending tenant index in order with its limit, as the plan for the
-- values does. The settings this changes are kept (agentqueue.plan_was) and put back by
-- fixed_plan_back right after the statement, for this transaction only (set_config's third
-- argument), so no other statement is planned or run under them.
SELECT set_config('agentqueue.plan_was', concat_ws(',', current_setting('plan_cache_mode'),
        current_setting('enable_sort'), current_setting('enable_bitmapscan'),
        current_setting('jit')), true),
    set_config('plan_cache_mode', 'force_generic_plan', true),
    set_config('enable_sort', 'off', true),
    set_config('enable_bitmapscan', 'off', true),
    set_config('jit', 'off', true)

-- name: fixed_plan_back
-- Put back the settings fixed_plan changed.
SELECT set_config('plan_cache_mode', split_part(current_setting('agentqueue.plan_was'), ',', 1),
        true),
    set_config('enable_sort', split_part(current_setting('agentqueue.plan_was'), ',', 2), true),
    set_config('enable_bitmapscan', split_part(current_setting('agentqueue.plan_was'), ',', 3),
        true),
    set_config('jit', split_part(current_setting('agentqueue.plan_was'), ',', 4), true)

-- name: active_load
-- Admitted work (queued or executing) by tenant and agent.
-- Admitted work (queued or executing), by what the caps are counted over.
-- Written as OR, not IN: the planner then can combine the two states' partial indexes.
SELECT tenant, agent, count(*) AS n FROM aq_tasks
WHERE state = 'queued' OR state = 'executing'
GROUP BY tenant, agent

-- name: preemptible
-- Executing tasks a P0 task may take the slot of, counted by agent.
-- Executing tasks a P0 task may take the slot of (R11), by agent.
SELECT agent, count(*) AS n FROM aq_tasks
WHERE state = 'executing' AND agent IS NOT NULL AND priority >= %(min_priority)s
  AND started_at <= %(before)s
GROUP BY agent

-- name: admission_room
-- How many tasks are admitted (queued or executing), and which tenants have pending work.
-- One count per state, each from its partial index (the state index leaves both out); the last
-- tenant with pending tasks (none pending: NULL) and one before it (several tenants: not NULL),
-- both read backwards in the pending tenant index, ordered by the whole of its key: no other
-- index gives that order, so the planner cannot walk the listing index instead, past every task
-- no longer pending, as it did when statistics taken before a drain still called nearly every
-- task pending. Never from the index's front: a tenant's oldest tasks are claimed first, and
-- until a vacuum their entries stay there, each a visit to the table (1 ms and more a read,
-- half-way through a drain of 20,000, where the end costs one entry).
SELECT (SELECT count(*) FROM aq_tasks WHERE state = 'queued')
     + (SELECT count(*) FROM aq_tasks WHERE state = 'executing') AS n,
    l.last,
    (SELECT tenant FROM aq_tasks WHERE state = 'pending' AND tenant < l.last
     ORDER BY tenant DESC, priority DESC, eligible_at DESC, seq DESC LIMIT 1) AS below
FROM (SELECT (SELECT tenant FROM aq_tasks WHERE state = 'pending'
              ORDER BY tenant DESC, priority DESC, eligible_at DESC, seq DESC LIMIT 1) AS last) l

-- name: pending_tenants
-- Tenants that have pending tasks, skipping through the index.
-- Up to %(limit)s tenants with pending work, found by skipping through the index.
-- From the last tenant down, each step landing at the end of the next tenant's entries (its
-- newest tasks) rather than their front, where the entries of its tasks admitted since the last
-- vacuum lie (see admission_room); given in tenant order.
WITH RECURSIVE tenants(tenant) AS (
    -- Ordered by the pending tenant index's whole key, as in admission_room: no other index
    -- gives that order, whatever the statistics say.
    SELECT (SELECT tenant FROM aq_tasks WHERE state = 'pending'
            ORDER BY tenant DESC, priority DESC, eligible_at DESC, seq DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant FROM aq_tasks t
            WHERE t.state = 'pending' AND t.tenant < tenants.tenant
            ORDER BY t.tenant DESC, t.priority DESC, t.eligible_at DESC, t.seq DESC LIMIT 1)
    FROM tenants WHERE tenants.tenant IS NOT NULL
)
SELECT tenant FROM (SELECT tenant FROM tenants WHERE tenant IS NOT NULL LIMIT %(limit)s) AS t
ORDER BY tenant

-- name: admission_candidates
-- The best admissible tasks of some tenants, per priority level.
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
-- The stored tokens of these rate limits.
SELECT name, tokens, updated_at FROM aq_rate_buckets WHERE name = ANY(%(names)s::text[])
FOR UPDATE

-- name: save_rate_buckets
-- Store rate limit tokens, from a JSON document.
INSERT INTO aq_rate_buckets (name, tokens, updated_at)
SELECT * FROM json_to_recordset(%(rows)s::json)
    AS r(name text, tokens double precision, updated_at timestamptz)
ON CONFLICT (name) DO UPDATE SET tokens = EXCLUDED.tokens, updated_at = EXCLUDED.updated_at

-- name: admit_ids
-- ADMIT the chosen tasks still pending and due; returns the ids admitted.
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
    RETURNING t.id, t.tenant, t.event_seq, t.last_hash, t.priority,
        aq_row_mac(t.last_hash, t.state, t.priority, t.payload::text, t.result::text,
                   t.assigned_to, t.approved_by, t.retry_count) AS row_mac
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash, row_mac)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'pending', 'queued', 'admit', %(actor)s, '',
        %(data)s::json, u.last_hash, u.row_mac
    FROM upd u
), counted AS (
    -- The depth of these events (pending to queued), as aq_metrics_rollup counts it (migration
    -- 0021).
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, u.tenant, '', '', 'depth', d.state, sum(d.delta), 0
    FROM upd u CROSS JOIN (VALUES ('pending', -1), ('queued', 1)) AS d(state, delta)
    GROUP BY u.tenant, d.state
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total
), notified AS (
    -- Workers hear of it when the transaction commits: news for the executors of the agent
    -- (%(to)s, store.base.routed_payload), 'p0' (everyone's) if it has a P0 task; with
    -- %(notify)s false, from notify_queued after the admission's claims instead.
    SELECT pg_notify('aq_queued', CASE WHEN bool_or(priority = 0) THEN 'p0' ELSE %(to)s END)
    FROM upd HAVING count(*) > 0 AND %(notify)s
)
SELECT id, n.sent FROM upd CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n
CROSS JOIN (SELECT set_config('agentqueue.counted', 'on', true)) AS counted_mark

-- name: note_waiting
-- Record why pending tasks wait, and set them aside until a time.
-- Why pending tasks wait (no agent can take them): shown by `show`, not a change of state.
-- Until %(until)s admission passes them by, so they never hold the window others wait behind.
UPDATE aq_tasks t SET state_reason = r.reason, route_after = %(until)s
FROM json_to_recordset(%(rows)s::json) AS r(id uuid, reason text)
WHERE t.id = r.id AND t.state = 'pending'

-- name: notify_queued
-- Announce queued work at commit, if any task is queued ('p0' if a P0 task is).
-- Sent after the claims of an admission that claimed (its ADMIT announced nothing): workers
-- hear of what it admitted and left queued, not of what it claimed itself; %(to)s names whose
-- work it admitted (store.base.routed_payload), so only their executors claim.
SELECT pg_notify('aq_queued', CASE WHEN EXISTS (
    SELECT 1 FROM aq_tasks WHERE state = 'queued' AND priority = 0) THEN 'p0' ELSE %(to)s END)
WHERE EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'queued')
