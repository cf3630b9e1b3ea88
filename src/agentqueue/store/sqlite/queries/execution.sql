-- The hot transitions of executors: CLAIM, COMPLETE, leases and checkpoints (SQLite).
-- They implement exactly what domain/states.py decides for CLAIM and COMPLETE (see
-- BULK_ACTIONS there; tests hold the two to the same result), and extend each task's audit
-- chain with aq_event_hash(), the domain's own chain_hash() registered on the connection; the
-- batch's shared hash tail arrives as :tail. In an UPDATE every expression reads the row as it
-- was, so event_seq + 1 and last_hash are the old head's successors. A statement that returns
-- ids is followed, in the same step, by its *_events statement over those ids (:written).

-- name: heartbeat
-- Extend the leases whose token still holds, short of the attempt's deadline plus grace; returns their ids.
UPDATE aq_tasks SET
    heartbeat_at = :now,
    lease_expires_at = min(:now + :ttl_us, locked_at + timeout_secs * 1000000 + :grace_us)
FROM json_each(:rows) AS r
WHERE aq_tasks.id = r.value ->> 'id'
  AND aq_tasks.lock_token = r.value ->> 'token'
  AND +aq_tasks.state = 'executing'  -- unary +: look rows up by id, not by state
  -- Past its deadline plus grace an attempt's lease cannot be extended: not held.
  AND aq_tasks.locked_at + aq_tasks.timeout_secs * 1000000 + :grace_us > :now
RETURNING aq_tasks.id

-- name: claim
-- CLAIM the best queued tasks for a worker, set-wise; returns them as claimed.
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

-- name: admit_for_claim
-- ADMIT, for the claim after it, the pending tasks it will take within the room a cap leaves.
-- The first step of the claim of admission under a global cap alone (Settings.claims_admit):
-- of the best tasks the claim could take in claim order (its types, none paused), queued ones
-- and pending ones that are due, the pending ones, no more than the cap leaves beside the
-- queued and executing tasks, none while several tenants have pending tasks and :one_tenant
-- (the planner weighs them). Counted and written in the claim's transaction: one writer at a
-- time. Their admit events follow (admit_events); `claim`, sent next, takes exactly the tasks
-- chosen here (the best of the queued ones it can take, which they now are among).
WITH room(n) AS (
    SELECT CASE
        -- Several tenants wait iff one sorts before the last (as admission_room reads it).
        WHEN :one_tenant AND (
            SELECT tenant FROM aq_tasks INDEXED BY aq_tasks_pending_tenant
            WHERE state = 'pending' AND tenant < (
                SELECT tenant FROM aq_tasks INDEXED BY aq_tasks_pending_tenant
                WHERE state = 'pending' ORDER BY tenant DESC LIMIT 1)
            ORDER BY tenant DESC LIMIT 1
        ) IS NOT NULL THEN 0
        ELSE max(0, min(:limit, :max_active
            - (SELECT count(*) FROM aq_tasks WHERE state IN ('queued', 'executing'))))
    END
), found AS (
    -- The first :limit queued and the first (room) pending of each priority level.
    SELECT t.seq, t.state, t.priority, t.eligible_at
    FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS lv
    JOIN aq_tasks AS t ON t.seq IN (
        SELECT q.seq FROM aq_tasks AS q
        WHERE q.state = 'queued' AND q.priority = lv.column1
          AND (:task_types IS NULL OR q.task_type IN (SELECT value FROM json_each(:task_types)))
          AND (:agents IS NULL OR q.agent IS NULL
               OR q.agent IN (SELECT value FROM json_each(:agents)))
          AND q.task_type NOT IN (SELECT value FROM json_each(:paused))
        ORDER BY q.eligible_at, q.seq
        LIMIT :limit)
      OR t.seq IN (
        SELECT q.seq FROM aq_tasks AS q
        WHERE q.state = 'pending' AND q.priority = lv.column1
          AND q.eligible_at <= :now
          AND (:task_types IS NULL OR q.task_type IN (SELECT value FROM json_each(:task_types)))
          AND q.task_type NOT IN (SELECT value FROM json_each(:paused))
        ORDER BY q.eligible_at, q.seq
        LIMIT (SELECT n FROM room))
), ranked AS (
    SELECT seq, state,
        row_number() OVER (ORDER BY (priority <> 0),
            CASE WHEN priority = 0 THEN 0
                 ELSE max(1, priority - (max(0, :now - eligible_at) / :aging_us)) END,
            eligible_at, seq) AS g
    FROM found
), chosen AS (
    -- The best in claim order, of the pending ones only the best the room allows.
    SELECT seq, state FROM (
        SELECT seq, state, g, row_number() OVER (PARTITION BY state ORDER BY g) AS r
        FROM ranked)
    WHERE state = 'queued' OR r <= (SELECT n FROM room)
    ORDER BY g LIMIT :limit
)
UPDATE aq_tasks SET
    state = 'queued',
    agent = NULL,
    state_reason = NULL,
    updated_at = :now,
    event_seq = event_seq + 1,
    last_hash = aq_event_hash(last_hash, id, tenant, event_seq + 1, :tail)
WHERE state = 'pending' AND seq IN (SELECT seq FROM chosen WHERE state = 'pending')
RETURNING id

-- name: claim_events
-- The claim events of the tasks just claimed (:written).
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash, gseq, row_mac)
SELECT id, event_seq, tenant, :now, 'queued', 'executing', 'claim', :worker, '', :data,
    last_hash,
    -- The next global numbers (R24): one writer at a time, so none is taken twice.
    (SELECT coalesce(max(gseq), 0) FROM aq_events WHERE gseq IS NOT NULL) + row_number() OVER (),
    aq_row_mac(last_hash, state, priority, payload, result, assigned_to, approved_by,
        retry_count)
FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:written))

-- name: complete
-- COMPLETE the tasks whose lease still holds, set-wise; returns each new audit head.
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
-- The complete events of the tasks just completed (:written).
INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor, reason,
    data, hash, gseq, row_mac)
SELECT id, event_seq, tenant, :now, 'executing', 'completed', 'complete', :actor, '', :data,
    last_hash,
    -- The next global numbers (R24): one writer at a time, so none is taken twice.
    (SELECT coalesce(max(gseq), 0) FROM aq_events WHERE gseq IS NOT NULL) + row_number() OVER (),
    aq_row_mac(last_hash, state, priority, payload, result, assigned_to, approved_by,
        retry_count)
FROM aq_tasks WHERE id IN (SELECT value FROM json_each(:written))

-- name: save_checkpoint
-- Keep a checkpoint with an executing task while its lease holds.
-- Fenced like every executor write: only while the lease holds. Progress, not a change of state:
-- no event (the checkpoint is recorded with the next change).
UPDATE aq_tasks SET checkpoint = :checkpoint
WHERE id = :id AND +state = 'executing' AND lock_token = :token
RETURNING id

-- name: queued_p0
-- Agent and type of the queued P0 tasks (and, asked, the pending ones due), without repeats.
-- Who the queued P0 tasks are for (the agent they were routed to, and their type): a busy worker
-- preempts only a task of an executor that could run one of them (R11). When claims admit (a
-- global cap alone), a P0 task waits in pending for a claim: those due by :pending_at count.
SELECT DISTINCT agent, task_type FROM (
    SELECT * FROM (SELECT agent, task_type FROM aq_tasks WHERE state = 'queued' AND priority = 0
                   LIMIT :limit)
    UNION ALL
    SELECT * FROM (SELECT agent, task_type FROM aq_tasks
                   WHERE :pending_at IS NOT NULL AND state = 'pending' AND priority = 0
                     AND eligible_at <= :pending_at LIMIT :limit)
) AS p0
