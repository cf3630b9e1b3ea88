-- The hot transitions of executors: CLAIM, COMPLETE, leases and checkpoints (PostgreSQL).
-- Applied to a whole batch in one statement each. They implement exactly what
-- domain/states.py decides for CLAIM and COMPLETE (see BULK_ACTIONS there; tests hold the two
-- to the same result), and extend each task's audit chain with aq_event_hash().

-- name: heartbeat
-- Extend the leases whose token still holds, short of the attempt's deadline plus grace; returns their ids.
UPDATE aq_tasks t SET
    heartbeat_at = %(now)s,
    lease_expires_at = LEAST(
        %(now)s::timestamptz + make_interval(secs => %(ttl_secs)s),
        t.locked_at + make_interval(secs => t.timeout_secs + %(grace_secs)s))
FROM json_to_recordset(%(rows)s::json) AS v(id uuid, token uuid)
WHERE t.id = v.id AND t.lock_token = v.token AND t.state = 'executing'
  -- Past its deadline plus grace an attempt's lease cannot be extended: not held.
  AND t.locked_at + make_interval(secs => t.timeout_secs + %(grace_secs)s) > %(now)s
RETURNING t.id

-- name: claim
-- CLAIM the best queued tasks for a worker, set-wise; returns them as claimed.
WITH picked AS (
    SELECT t.ctid, t.id, t.first FROM generate_series(0, 9) AS lv(priority)
    CROSS JOIN LATERAL (
        -- first: never started before (only a claim sets started_at): its latency is counted.
        SELECT ctid, id, started_at IS NULL AS first, priority, eligible_at, seq FROM aq_tasks
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
        reason, data, hash, row_mac)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'queued', 'executing', 'claim', %(worker)s, '',
        %(data)s::json, u.last_hash,
        -- The row as updated, signed with its head event (R24).
        aq_row_mac(u.last_hash, u.state, u.priority, u.payload::text, u.result::text,
                   u.assigned_to, u.approved_by, u.retry_count)
    FROM upd u
), counted AS (
    -- The metrics of these events, as aq_metrics_rollup counts them (migration 0021): the
    -- latency of each first start, and the depth (queued to executing).
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, u.tenant, u.task_type, coalesce(u.agent, ''), 'latency',
        aq_metric_bucket(s.v), count(*), sum(s.v)
    FROM upd u JOIN picked p ON p.id = u.id
    CROSS JOIN LATERAL (
        SELECT extract(epoch FROM %(now)s::timestamptz - u.created_at)::double precision AS v
    ) s
    WHERE p.first
    GROUP BY u.tenant, u.task_type, u.agent, aq_metric_bucket(s.v)
    UNION ALL
    SELECT pg_backend_pid()::text, u.tenant, '', '', 'depth', d.state, sum(d.delta), 0
    FROM upd u CROSS JOIN (VALUES ('queued', -1), ('executing', 1)) AS d(state, delta)
    GROUP BY u.tenant, d.state
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total
)
-- The mark that this statement counted its events (read and cleared by the trigger as the
-- statement ends); with no row claimed it may not be set, and the trigger counts no event.
SELECT upd.* FROM upd
CROSS JOIN (SELECT set_config('agentqueue.counted', 'on', true)) AS counted_mark
ORDER BY
    (priority <> 0),
    CASE WHEN priority = 0 THEN 0 ELSE GREATEST(1, priority - floor(
        GREATEST(0, extract(epoch FROM (%(now)s::timestamptz - eligible_at)))
        / %(aging_secs)s)::integer) END,
    eligible_at, seq

-- name: claim_room
-- Count the room a global cap leaves, for claim_admitting: after the admission lock, before it.
-- What `admit` counts (none while several tenants have pending tasks and %(one_tenant)s: the
-- planner weighs them), kept in a setting of this transaction that claim_admitting reads. Its
-- own statement, sent after the admission lock's: its snapshot sees every admission before.
-- Several tenants wait iff one sorts before the last: both read backwards in the pending tenant
-- index (see admission_room), never from its front, where the entries of tasks claimed since
-- the last vacuum lie.
SELECT set_config('agentqueue.claim_room', CASE
    WHEN %(one_tenant)s AND (
        SELECT tenant FROM aq_tasks WHERE state = 'pending' AND tenant < (
            SELECT tenant FROM aq_tasks WHERE state = 'pending'
            ORDER BY tenant DESC, priority DESC, eligible_at DESC, seq DESC LIMIT 1)
        ORDER BY tenant DESC, priority DESC, eligible_at DESC, seq DESC LIMIT 1
    ) IS NOT NULL THEN 0
    ELSE GREATEST(0, %(max_active)s::integer
        - (SELECT count(*) FROM aq_tasks WHERE state = 'queued')
        - (SELECT count(*) FROM aq_tasks WHERE state = 'executing'))
END::text, true)

-- name: claim_admitting
-- CLAIM for a worker under a global cap alone, admitting what it takes; returns them as claimed.
-- The claim of admission under a global cap alone (Settings.claims_admit): the best tasks in
-- claim order among the queued ones and the pending ones within the room claim_room counted
-- just before (under the admission lock), each pending one admitted and claimed in one row
-- update with both events, ADMIT then CLAIM, as decide() would write them one after the other
-- (the admit event signs the row as it stood queued). Rows come back unordered (the store
-- sorts them), which keeps the query within psycopg's 4 KiB cache.
WITH room AS (
    SELECT LEAST(%(limit)s, current_setting('agentqueue.claim_room')::integer) AS n
), found AS (
    -- The best of each priority level, queued and pending, ranked together in claim order.
    SELECT t.*, row_number() OVER (ORDER BY (t.priority <> 0),
        CASE WHEN t.priority = 0 THEN 0 ELSE GREATEST(1, t.priority - floor(GREATEST(0,
        extract(epoch FROM (%(now)s::timestamptz - t.eligible_at))) / %(aging_secs)s)::integer)
        END, t.eligible_at, t.seq) AS g
    FROM generate_series(0, 9) AS lv(priority)
    CROSS JOIN LATERAL (
        SELECT * FROM (SELECT ctid, id, started_at IS NULL AS first, priority, eligible_at, seq,
            false AS admit, last_hash AS prev, assigned_to AS was_assigned, tenant, event_seq
        FROM aq_tasks
        WHERE state = 'queued' AND priority = lv.priority
          AND (%(task_types)s::text[] IS NULL OR task_type = ANY(%(task_types)s::text[]))
          AND (%(agents)s::text[] IS NULL OR agent IS NULL OR agent = ANY(%(agents)s::text[]))
          AND NOT (task_type = ANY(%(paused)s::text[]))
        ORDER BY eligible_at, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED) q
        UNION ALL
        SELECT * FROM (SELECT ctid, id, started_at IS NULL, priority, eligible_at, seq, true,
            last_hash, assigned_to, tenant, event_seq FROM aq_tasks
        WHERE state = 'pending' AND priority = lv.priority AND eligible_at <= %(now)s
          AND (%(task_types)s::text[] IS NULL OR task_type = ANY(%(task_types)s::text[]))
          AND NOT (task_type = ANY(%(paused)s::text[]))
        ORDER BY eligible_at, seq LIMIT (SELECT n FROM room) FOR UPDATE SKIP LOCKED) p
    ) t
), picked AS (
    -- The best in claim order, of the pending ones only the best the room allows (a P0 task
    -- pending goes before a task queued again); the hash of a pending task's admit event here,
    -- once (the update and its event read it).
    SELECT ctid, id, first, admit, was_assigned, CASE WHEN admit
        THEN aq_event_hash(prev, id, tenant, event_seq + 1, %(admit_tail)s) END AS ah
    FROM (SELECT *, row_number() OVER (PARTITION BY admit ORDER BY g) AS r FROM found) f
    WHERE r <= CASE WHEN admit THEN (SELECT n FROM room) ELSE %(limit)s END
    ORDER BY g LIMIT %(limit)s
), upd AS (
    UPDATE aq_tasks t SET
        state = 'executing',
        agent = CASE WHEN p.admit THEN NULL ELSE t.agent END,
        lock_token = gen_random_uuid(),
        locked_at = %(now)s,
        heartbeat_at = %(now)s,
        lease_expires_at = %(now)s::timestamptz
            + make_interval(secs => LEAST(%(ttl_secs)s, t.timeout_secs + %(grace_secs)s)),
        assigned_to = %(worker)s,
        started_at = %(now)s,
        state_reason = NULL,
        updated_at = %(now)s,
        event_seq = t.event_seq + 1 + p.admit::integer,
        last_hash = aq_event_hash(coalesce(p.ah, t.last_hash), t.id, t.tenant,
            t.event_seq + 1 + p.admit::integer, %(tail)s)
    -- A TID scan of the picked rows, joined to their picks (for the admit hash); arguments the
    -- hash functions read twice are plain values, so PostgreSQL inlines the functions.
    FROM picked p WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked)) AND t.ctid = p.ctid
    RETURNING t.*
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash, row_mac)
    SELECT u.id, u.event_seq - 1, u.tenant, %(now)s, 'pending', 'queued', 'admit', %(worker)s,
        '', %(admit_data)s::json, p.ah, aq_row_mac(p.ah, 'queued', u.priority, u.payload::text,
        u.result::text, p.was_assigned, u.approved_by, u.retry_count)
    FROM upd u JOIN picked p ON p.id = u.id AND p.admit
    UNION ALL
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'queued', 'executing', 'claim', %(worker)s, '',
        %(data)s::json, u.last_hash, aq_row_mac(u.last_hash, u.state, u.priority,
        u.payload::text, u.result::text, u.assigned_to, u.approved_by, u.retry_count)
    FROM upd u
), counted AS (
    -- As in claim: the latency of each first start, and the depth (a task admitted here goes
    -- from pending to executing).
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, u.tenant, x.tt, x.ag, x.metric, x.label, sum(x.n), sum(x.v)
    FROM upd u JOIN picked p ON p.id = u.id
    CROSS JOIN LATERAL (
        SELECT extract(epoch FROM %(now)s::timestamptz - u.created_at)::double precision AS v
    ) s
    CROSS JOIN LATERAL (
        SELECT u.task_type AS tt, coalesce(u.agent, '') AS ag, 'latency' AS metric,
            aq_metric_bucket(s.v) AS label, 1 AS n, s.v AS v WHERE p.first
        UNION ALL SELECT '', '', 'depth', CASE WHEN p.admit THEN 'pending' ELSE 'queued' END, -1, 0
        UNION ALL SELECT '', '', 'depth', 'executing', 1, 0
    ) x
    GROUP BY u.tenant, x.tt, x.ag, x.metric, x.label
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total
)
-- The mark that this statement counted its events (see claim).
SELECT upd.* FROM upd
CROSS JOIN (SELECT set_config('agentqueue.counted', 'on', true)) AS counted_mark

-- name: complete
-- COMPLETE the tasks whose lease still holds, set-wise; returns each new audit head.
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
    RETURNING t.id, t.tenant, t.event_seq, t.last_hash, t.task_type, t.agent, t.started_at,
        -- The row as updated, signed with its head event (R24).
        aq_row_mac(t.last_hash, t.state, t.priority, t.payload::text, t.result::text,
                   t.assigned_to, t.approved_by, t.retry_count) AS row_mac
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash, row_mac)
    SELECT u.id, u.event_seq, u.tenant, %(now)s, 'executing', 'completed', 'complete',
        %(actor)s, '', %(data)s::json, u.last_hash, u.row_mac
    FROM upd u
), counted AS (
    -- The metrics of these events, as aq_metrics_rollup counts them (migration 0021): each
    -- ending, the time from its start, and the depth (out of executing).
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, u.tenant, u.task_type, coalesce(u.agent, ''), x.metric,
        x.label, count(*), sum(x.v)
    FROM upd u
    CROSS JOIN LATERAL (
        SELECT 'ended' AS metric, 'completed' AS label, 0::double precision AS v
        UNION ALL
        SELECT 'completion', aq_metric_bucket(s.v), s.v
        FROM (SELECT extract(epoch FROM %(now)s::timestamptz - u.started_at)::double precision
              AS v) s
        WHERE u.started_at IS NOT NULL
    ) x
    GROUP BY u.tenant, u.task_type, u.agent, x.metric, x.label
    UNION ALL
    SELECT pg_backend_pid()::text, u.tenant, '', '', 'depth', 'executing', -count(*), 0
    FROM upd u
    GROUP BY u.tenant
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total
), notified AS (
    -- Tasks waiting on dependencies may be free now, or admission under caps has room again:
    -- wake the scheduler (one notice a batch; for dependencies only while such tasks exist,
    -- one probe of a small partial index).
    SELECT pg_notify('aq_pending', 'completed')
    WHERE EXISTS (SELECT 1 FROM upd)
      AND (%(wake)s OR EXISTS (SELECT 1 FROM aq_tasks
                               WHERE state = 'blocked' AND hold = 'dependencies'))
)
-- The mark that this statement counted its events (see claim).
SELECT id, event_seq, last_hash, n.sent FROM upd
CROSS JOIN (SELECT count(*) AS sent FROM notified) AS n
CROSS JOIN (SELECT set_config('agentqueue.counted', 'on', true)) AS counted_mark

-- name: save_checkpoint
-- Keep a checkpoint with an executing task while its lease holds.
-- Fenced like every executor write: only while the lease holds. Progress, not a change of state:
-- no event (the checkpoint is recorded with the next change).
UPDATE aq_tasks SET checkpoint = %(checkpoint)s::jsonb
WHERE id = %(id)s AND state = 'executing' AND lock_token = %(token)s
RETURNING id

-- name: queued_p0
-- Agent and type of the queued P0 tasks (and, asked, the pending ones due), without repeats.
-- Who the queued P0 tasks are for (the agent they were routed to, and their type): a busy worker
-- preempts only a task of an executor that could run one of them (R11). When claims admit (a
-- global cap alone), a P0 task waits in pending for a claim: those due by %(pending_at)s count.
SELECT DISTINCT agent, task_type FROM (
    (SELECT agent, task_type FROM aq_tasks WHERE state = 'queued' AND priority = 0
     LIMIT %(limit)s)
    UNION ALL
    (SELECT agent, task_type FROM aq_tasks
     WHERE %(pending_at)s::timestamptz IS NOT NULL AND state = 'pending' AND priority = 0
       AND eligible_at <= %(pending_at)s LIMIT %(limit)s)
) AS p0
