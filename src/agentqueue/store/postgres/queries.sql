-- Named queries for PostgreSQL (psycopg 3, %(name)s parameters).
-- Bulk statements take one array per column and unnest them: one round trip per batch.

-- name: insert_tasks
WITH v AS (
    SELECT * FROM unnest(
        %(id)s::uuid[], %(tenant)s::text[], %(source)s::text[], %(source_id)s::text[],
        %(title)s::text[], %(task_type)s::text[], %(payload)s::jsonb[], %(priority)s::smallint[],
        %(state)s::text[], %(max_retries)s::smallint[], %(timeout_secs)s::integer[],
        %(assignee)s::text[], %(depends_on)s::text[], %(idempotency_key)s::text[],
        %(callback_url)s::text[], %(requested_by)s::text[], %(run_after)s::timestamptz[],
        %(eligible_at)s::timestamptz[], %(created_at)s::timestamptz[],
        %(event_seq)s::integer[], %(last_hash)s::text[]
    ) WITH ORDINALITY AS v(id, tenant, source, source_id, title, task_type, payload, priority,
        state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
        requested_by, run_after, eligible_at, created_at, event_seq, last_hash, ord)
), ins AS (
    INSERT INTO aq_tasks (id, tenant, source, source_id, title, task_type, payload, priority,
        state, max_retries, timeout_secs, assignee, depends_on, idempotency_key, callback_url,
        requested_by, run_after, eligible_at, created_at, updated_at, event_seq, last_hash)
    SELECT id, tenant, source, source_id, title, task_type, payload, priority,
        state, max_retries, timeout_secs, assignee, depends_on::uuid[], idempotency_key,
        callback_url, requested_by, run_after, eligible_at, created_at, created_at, event_seq,
        last_hash
    FROM v ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING id, seq
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT e.* FROM unnest(
        %(e_task_id)s::uuid[], %(e_seq)s::integer[], %(e_tenant)s::text[],
        %(e_at)s::timestamptz[], %(e_from)s::text[], %(e_to)s::text[], %(e_action)s::text[],
        %(e_actor)s::text[], %(e_reason)s::text[], %(e_data)s::json[], %(e_hash)s::text[]
    ) AS e(task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data, hash)
    WHERE e.task_id IN (SELECT id FROM ins)
)
SELECT id, seq FROM ins

-- name: apply
WITH v AS (
    SELECT * FROM unnest(
        %(id)s::uuid[], %(expected_state)s::text[], %(expected_seq)s::integer[],
        %(state)s::text[], %(state_reason)s::text[], %(priority)s::smallint[],
        %(retry_count)s::smallint[], %(lock_token)s::uuid[], %(locked_at)s::timestamptz[],
        %(heartbeat_at)s::timestamptz[], %(lease_expires_at)s::timestamptz[],
        %(assignee)s::text[], %(assigned_to)s::text[], %(checkpoint)s::jsonb[],
        %(tool_calls)s::jsonb[], %(result)s::jsonb[], %(error)s::text[], %(approved_by)s::text[],
        %(run_after)s::timestamptz[], %(eligible_at)s::timestamptz[],
        %(started_at)s::timestamptz[], %(finished_at)s::timestamptz[],
        %(updated_at)s::timestamptz[], %(event_seq)s::integer[], %(last_hash)s::text[]
    ) AS v(id, expected_state, expected_seq, state, state_reason, priority, retry_count,
        lock_token, locked_at, heartbeat_at, lease_expires_at, assignee, assigned_to, checkpoint,
        tool_calls, result, error, approved_by, run_after, eligible_at, started_at, finished_at,
        updated_at, event_seq, last_hash)
), u AS (
    UPDATE aq_tasks t SET
        state = v.state, state_reason = v.state_reason, priority = v.priority,
        retry_count = v.retry_count, lock_token = v.lock_token, locked_at = v.locked_at,
        heartbeat_at = v.heartbeat_at, lease_expires_at = v.lease_expires_at,
        assignee = v.assignee, assigned_to = v.assigned_to, checkpoint = v.checkpoint,
        tool_calls = v.tool_calls, result = v.result, error = v.error,
        approved_by = v.approved_by, run_after = v.run_after, eligible_at = v.eligible_at,
        started_at = v.started_at, finished_at = v.finished_at, updated_at = v.updated_at,
        event_seq = v.event_seq, last_hash = v.last_hash
    FROM v
    WHERE t.id = v.id AND t.state = v.expected_state AND t.event_seq = v.expected_seq
    RETURNING t.id
), ev AS (
    INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,
        reason, data, hash)
    SELECT e.* FROM unnest(
        %(e_task_id)s::uuid[], %(e_seq)s::integer[], %(e_tenant)s::text[],
        %(e_at)s::timestamptz[], %(e_from)s::text[], %(e_to)s::text[], %(e_action)s::text[],
        %(e_actor)s::text[], %(e_reason)s::text[], %(e_data)s::json[], %(e_hash)s::text[]
    ) AS e(task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data, hash)
    WHERE e.task_id IN (SELECT id FROM u)
)
SELECT id FROM u

-- name: lock_tasks
SELECT * FROM aq_tasks
WHERE id = ANY(%(ids)s::uuid[]) AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY id
FOR UPDATE

-- name: lock_claimable
-- The best tasks by (lane, aged priority, eligible_at, seq) are among the first `limit` of each
-- priority level, so ten short index scans replace a sort of the whole queue (R4).
SELECT t.* FROM generate_series(0, 9) AS lv(priority)
CROSS JOIN LATERAL (
    SELECT * FROM aq_tasks
    WHERE state = 'queued' AND priority = lv.priority
      AND (%(task_types)s::text[] IS NULL OR task_type = ANY(%(task_types)s::text[]))
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

-- name: lock_admissible
SELECT t.* FROM generate_series(0, 9) AS lv(priority)
CROSS JOIN LATERAL (
    SELECT * FROM aq_tasks
    WHERE state = 'pending' AND priority = lv.priority
      AND (run_after IS NULL OR run_after <= %(now)s)
      AND cardinality(depends_on) = 0
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
FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS v(id, token)
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
SELECT * FROM unnest(
    %(task_id)s::uuid[], %(tenant)s::text[], %(attempt)s::integer[], %(stream)s::text[],
    %(at)s::timestamptz[], %(text)s::text[], %(truncated)s::boolean[]
)

-- name: logs
SELECT task_id, tenant, attempt, stream, at, text, truncated FROM aq_task_logs
WHERE task_id = %(task_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY id

-- name: listen
LISTEN {channel}
