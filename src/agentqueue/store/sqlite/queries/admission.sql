-- Admission (R4, R12): ADMIT set-wise, and what admission under limits counts (SQLite).
-- ADMIT extends each task's audit chain like the hot transitions of execution.sql do (the
-- batch's hash tail as :tail; its events follow in admit_events over the ids written).

-- name: admit
-- ADMIT the best admissible pending tasks, set-wise, up to the limit; returns their ids.
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
-- The admit events of the tasks just admitted (:written).
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash, gseq, row_mac)
SELECT id, event_seq, tenant, :now, 'pending', 'queued', 'admit', :actor, '', :data, last_hash,
    -- The next global numbers (R24): one writer at a time, so none is taken twice.
    (SELECT coalesce(max(gseq), 0) FROM aq_events WHERE gseq IS NOT NULL) + row_number() OVER (),
    -- The row as updated, signed with its head event (R24).
    aq_row_mac(last_hash, state, priority, payload, result, assigned_to, approved_by,
        retry_count)
FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:written))

-- name: active_load
-- Admitted work (queued or executing) by tenant and agent.
-- Admitted work (queued or executing), by what the caps are counted over.
SELECT tenant, agent, count(*) AS n FROM aq_tasks
WHERE state IN ('queued', 'executing')
GROUP BY tenant, agent

-- name: preemptible
-- Executing tasks a P0 task may take the slot of, counted by agent.
-- Executing tasks a P0 task may take the slot of (R11), by agent.
SELECT agent, count(*) AS n FROM aq_tasks
WHERE state = 'executing' AND agent IS NOT NULL AND priority >= :min_priority
  AND started_at <= :before
GROUP BY agent

-- name: admission_room
-- How many tasks are admitted (queued or executing), and which tenants have pending work.
-- The last tenant with pending tasks (none pending: NULL) and one before it (several tenants:
-- not NULL), as PostgreSQL reads them, from the pending tenant index, named: without
-- statistics SQLite would sort every pending task by tenant.
SELECT (SELECT count(*) FROM aq_tasks WHERE state IN ('queued', 'executing')) AS n,
    l.last,
    (SELECT tenant FROM aq_tasks INDEXED BY aq_tasks_pending_tenant
     WHERE state = 'pending' AND tenant < l.last ORDER BY tenant DESC LIMIT 1) AS below
FROM (SELECT (SELECT tenant FROM aq_tasks INDEXED BY aq_tasks_pending_tenant
              WHERE state = 'pending' ORDER BY tenant DESC LIMIT 1) AS last) AS l

-- name: pending_tenants
-- Tenants that have pending tasks, skipping through the index.
-- Up to :limit tenants with pending work, found by skipping through the index.
WITH RECURSIVE tenants(tenant) AS (
    -- The pending tenant index named, as in admission_room: each step one index probe, not a
    -- sort of every pending task. From the last tenant down, as PostgreSQL reads them.
    SELECT (SELECT tenant FROM aq_tasks INDEXED BY aq_tasks_pending_tenant
            WHERE state = 'pending' ORDER BY tenant DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant FROM aq_tasks t INDEXED BY aq_tasks_pending_tenant
            WHERE t.state = 'pending' AND t.tenant < tenants.tenant
            ORDER BY t.tenant DESC LIMIT 1)
    FROM tenants WHERE tenants.tenant IS NOT NULL
)
SELECT tenant FROM (SELECT tenant FROM tenants WHERE tenant IS NOT NULL LIMIT :limit) AS t
ORDER BY tenant

-- name: admission_candidates
-- The best admissible tasks of some tenants, per priority level.
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
-- The stored tokens of these rate limits.
SELECT name, tokens, updated_at FROM aq_rate_buckets
WHERE name IN (SELECT value FROM json_each(:names))

-- name: save_rate_buckets
-- Store rate limit tokens, from a JSON document.
INSERT INTO aq_rate_buckets (name, tokens, updated_at)
SELECT r.value ->> 'name', r.value ->> 'tokens', r.value ->> 'updated_at'
FROM json_each(:rows) AS r
WHERE true
ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at

-- name: admit_ids
-- ADMIT the chosen tasks still pending and due; returns the ids admitted.
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

-- name: note_waiting
-- Record why pending tasks wait, and set them aside until a time.
-- Why pending tasks wait (no agent can take them): shown by `show`, not a change of state.
-- Until :until admission passes them by, so they never hold the window others wait behind.
UPDATE aq_tasks SET route_after = :until, state_reason = (
    SELECT r.value ->> 'reason' FROM json_each(:rows) AS r WHERE r.value ->> 'id' = aq_tasks.id)
WHERE id IN (SELECT r.value ->> 'id' FROM json_each(:rows) AS r)
  AND state = 'pending'

-- name: notify_queued
-- Announce queued work at commit, if any task is queued: nothing to send in SQLite.
-- SQLite's listeners see every commit (PRAGMA data_version); the name keeps one operation in
-- both dialects.
SELECT 1 WHERE 0
