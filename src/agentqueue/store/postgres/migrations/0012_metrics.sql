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
-- A histogram row's label is the index of the first bucket bound >= the value in
-- aq_metric_buckets (the count of bounds below it; one past the last bound is +Inf), and its
-- total the sum of the values that fell there.
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

-- The histogram bucket bounds, in seconds (the same list as domain/metrics.py BUCKETS; a test
-- holds the two equal).
CREATE TABLE aq_metric_buckets (le double precision PRIMARY KEY);
INSERT INTO aq_metric_buckets (le) VALUES
    (0.01), (0.05), (0.1), (0.25), (0.5), (1), (2.5), (5), (10), (30), (60), (120), (300),
    (600), (1800), (3600);

CREATE FUNCTION aq_metric_bucket(v double precision) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT count(*)::text FROM aq_metric_buckets WHERE le < v
$$;

CREATE FUNCTION aq_metrics_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, o.tenant, o.task_type, o.agent, o.metric, o.label,
           count(*), coalesce(sum(o.v), 0)
    FROM (
        SELECT e.tenant, t.task_type, coalesce(t.agent, '') AS agent, x.metric, x.label, x.v
        FROM aq_new_events e
        JOIN aq_tasks t ON t.id = e.task_id
        CROSS JOIN LATERAL (
            SELECT 'ended' AS metric,
                   CASE WHEN e.to_state = 'dead_letter' AND (e.data ->> 'timeout') = 'true'
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
                              WHERE p.task_id = e.task_id AND p.seq < e.seq
                                AND p.action = 'claim')
            UNION ALL
            SELECT 'retry', '', 0 WHERE (e.data ->> 'retry') IS NOT NULL
            UNION ALL
            SELECT 'lapse',
                   CASE WHEN (e.data ->> 'timeout') = 'true' THEN 'timeout' ELSE 'heartbeat' END, 0
            WHERE e.action = 'lease_expired'
        ) x
    ) o
    GROUP BY o.tenant, o.task_type, o.agent, o.metric, o.label
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total;
    RETURN NULL;
END
$$;

CREATE TRIGGER aq_events_metrics AFTER INSERT ON aq_events
    REFERENCING NEW TABLE AS aq_new_events
    FOR EACH STATEMENT EXECUTE FUNCTION aq_metrics_rollup();

-- Each worker's slots, written with its heartbeat: who is alive and how busy.
CREATE TABLE aq_workers (
    name         text PRIMARY KEY,
    slots        integer NOT NULL,
    busy         integer NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

