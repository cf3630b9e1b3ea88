-- Prometheus metrics (R19): the queue's counters and histogram buckets, kept in the database so
-- that every process sharing it reports the same truth.
--
-- One rollup row per (writer, tenant, task_type, agent, metric, label). The rows are written by
-- a statement-level trigger on aq_events, so a count is written in the transaction of the change
-- it counts (every state change writes its event there: R3), once per statement (one upsert per
-- claim or outcome batch), and keyed by the writing connection, so concurrent writers never
-- wait on one row. Scrapes sum the rows.
--
-- metric 'ended'      label: completed, failed, timeout, dead_letter, cancelled (per ending)
-- metric 'retry'      label: '' (an event that records a retry: its data has "retry")
-- metric 'latency'    label: bucket index (created -> first start, once per task)
-- metric 'completion' label: bucket index (last start -> ending, once per ending of a started task)
-- metric 'lapse'      label: timeout, heartbeat (leases the scheduler took back)
-- metric 'depth'      label: a live state; n sums to the tasks in it (every event moves one
--                     task between states; seeded from the table when this migration runs), so
--                     a scrape reads a few rows instead of counting a backlog of millions
-- A histogram row's label is the index of the first bucket bound >= the value (see
-- aq_metric_bucket), and its total the sum of the values that fell there.
CREATE TABLE aq_metric_counts (
    writer    text NOT NULL,
    tenant    text NOT NULL,
    task_type text NOT NULL,
    agent     text NOT NULL,
    metric    text NOT NULL,
    label     text NOT NULL,
    n         bigint NOT NULL,
    total     double precision NOT NULL,
    PRIMARY KEY (writer, tenant, task_type, agent, metric, label)
);

-- The histogram bucket a value falls in: the count of bounds below it (one past the last bound
-- is +Inf). The bounds, in seconds, are domain/metrics.py BUCKETS (a test holds the two equal),
-- negated here because width_bucket counts the bounds at or below its operand. One expression,
-- so the planner inlines it.
CREATE FUNCTION aq_metric_bucket(v double precision) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (16 - width_bucket(-v, '{-3600, -1800, -600, -300, -120, -60, -30, -10, -5, -2.5, -1,
                                    -0.5, -0.25, -0.1, -0.05, -0.01}'::float8[]))::text
$$;

CREATE FUNCTION aq_metrics_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, e.tenant, t.task_type, coalesce(t.agent, ''), x.metric,
           x.label, count(*), sum(x.v)
    FROM (
        SELECT ne.task_id, ne.seq, ne.tenant, ne.at, ne.from_state, ne.to_state, ne.action,
               -- The data is parsed only where it tells something (not for claims and
               -- completions, the bulk of the rows).
               CASE WHEN ne.to_state = 'dead_letter' OR ne.action = 'lease_expired'
                    THEN (ne.data ->> 'timeout') = 'true' ELSE false END AS timed_out,
               CASE WHEN ne.to_state IN ('retrying', 'queued')
                    THEN (ne.data ->> 'retry') IS NOT NULL ELSE false END AS retried
        FROM aq_new_events ne
        -- Only the events something is counted for (the others are most of a busy queue's).
        WHERE ne.action IN ('claim', 'lease_expired')
           OR ne.to_state IN ('completed', 'failed', 'dead_letter', 'cancelled', 'retrying')
           OR (ne.from_state = 'waiting_tool' AND ne.to_state = 'queued')
    ) e
    -- Lateral: one primary-key probe per event, whatever the planner guesses of the
    -- transition table's size (it has no statistics).
    CROSS JOIN LATERAL (
        SELECT task_type, agent, created_at, started_at FROM aq_tasks WHERE id = e.task_id
    ) t
    CROSS JOIN LATERAL (
        SELECT 'ended' AS metric,
               CASE WHEN e.to_state = 'dead_letter' AND e.timed_out
                    THEN 'timeout' ELSE e.to_state END AS label,
               0::double precision AS v
        WHERE e.to_state IN ('completed', 'failed', 'dead_letter', 'cancelled')
        UNION ALL
        SELECT 'completion', aq_metric_bucket(s.v), s.v
        FROM (SELECT extract(epoch FROM e.at - t.started_at)::double precision AS v) s
        WHERE e.to_state IN ('completed', 'failed', 'dead_letter', 'cancelled')
          AND t.started_at IS NOT NULL
        UNION ALL
        SELECT 'latency', aq_metric_bucket(s.v), s.v
        FROM (SELECT extract(epoch FROM e.at - t.created_at)::double precision AS v) s
        WHERE e.action = 'claim'
          AND NOT EXISTS (SELECT 1 FROM aq_events p
                          WHERE p.task_id = e.task_id AND p.seq < e.seq AND p.action = 'claim')
        UNION ALL
        SELECT 'retry', '', 0 WHERE e.retried
        UNION ALL
        SELECT 'lapse', CASE WHEN e.timed_out THEN 'timeout' ELSE 'heartbeat' END, 0
        WHERE e.action = 'lease_expired'
    ) x
    GROUP BY e.tenant, t.task_type, t.agent, x.metric, x.label
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total;
    -- Depth: every change of state moves one task out of one live state and into another.
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, ne.tenant, '', '', 'depth', d.state, sum(d.delta), 0
    FROM aq_new_events ne
    CROSS JOIN LATERAL (VALUES (ne.to_state, 1), (ne.from_state, -1)) AS d(state, delta)
    WHERE ne.from_state IS DISTINCT FROM ne.to_state
      AND d.state IN ('pending', 'blocked', 'queued', 'executing', 'waiting_tool', 'retrying',
                      'dead_letter', 'manual_review')
    GROUP BY ne.tenant, d.state
    HAVING sum(d.delta) <> 0
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n;
    RETURN NULL;
END
$$;

-- No change is written while the trigger starts and the depth is seeded from the tasks there.
LOCK TABLE aq_tasks, aq_events IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER aq_events_metrics AFTER INSERT ON aq_events
    REFERENCING NEW TABLE AS aq_new_events
    FOR EACH STATEMENT EXECUTE FUNCTION aq_metrics_rollup();

INSERT INTO aq_metric_counts (writer, tenant, task_type, agent, metric, label, n, total)
SELECT 'migration', tenant, '', '', 'depth', state, count(*), 0 FROM aq_tasks
WHERE state IN ('pending', 'blocked', 'queued', 'executing', 'waiting_tool', 'retrying',
                'dead_letter', 'manual_review')
GROUP BY tenant, state;

-- Each worker's slots, written with its heartbeat: who is alive and how busy.
CREATE TABLE aq_workers (
    name         text PRIMARY KEY,
    slots        integer NOT NULL,
    busy         integer NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

