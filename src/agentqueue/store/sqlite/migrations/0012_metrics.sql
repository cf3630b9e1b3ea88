-- Prometheus metrics (R19): the queue's counters and histogram buckets, kept in the database so
-- that every process sharing it reports the same truth. See the PostgreSQL migration 0012 for
-- the meaning of each metric and label. SQLite has one writer at a time, so there is one writer
-- key ('') and a row trigger: each counted event updates its rollup rows in the transaction
-- that writes it.
CREATE TABLE aq_metric_counts (
    writer    TEXT NOT NULL,
    tenant    TEXT NOT NULL,
    task_type TEXT NOT NULL,
    agent     TEXT NOT NULL,
    metric    TEXT NOT NULL,
    label     TEXT NOT NULL,
    n         INTEGER NOT NULL,
    total     REAL NOT NULL,
    PRIMARY KEY (writer, tenant, task_type, agent, metric, label)
);

-- The histogram bucket bounds, in seconds (domain/metrics.py BUCKETS; a test holds them equal).
CREATE TABLE aq_metric_buckets (le REAL PRIMARY KEY);
INSERT INTO aq_metric_buckets (le) VALUES
    (0.01), (0.05), (0.1), (0.25), (0.5), (1), (2.5), (5), (10), (30), (60), (120), (300),
    (600), (1800), (3600);

-- One trigger per kind of count, each with the condition that selects its events, so an event
-- that counts for nothing (most of them) costs one test of its WHEN clauses.
CREATE TRIGGER aq_events_metrics_ended AFTER INSERT ON aq_events
WHEN NEW.to_state IN ('completed', 'failed', 'dead_letter', 'cancelled')
BEGIN
    INSERT INTO aq_metric_counts (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT '', NEW.tenant, t.task_type, coalesce(t.agent, ''), 'ended',
        CASE WHEN NEW.to_state = 'dead_letter' AND json_extract(NEW.data, '$.timeout') IS 1
             THEN 'timeout' ELSE NEW.to_state END, 1, 0.0
    FROM aq_tasks t WHERE t.id = NEW.task_id
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
    INSERT INTO aq_metric_counts (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT '', NEW.tenant, t.task_type, coalesce(t.agent, ''), 'completion',
        (SELECT CAST(count(*) AS TEXT) FROM aq_metric_buckets
         WHERE le < (NEW.at - t.started_at) / 1e6), 1, (NEW.at - t.started_at) / 1e6
    FROM aq_tasks t WHERE t.id = NEW.task_id AND t.started_at IS NOT NULL
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

CREATE TRIGGER aq_events_metrics_latency AFTER INSERT ON aq_events
WHEN NEW.action = 'claim'
BEGIN
    INSERT INTO aq_metric_counts (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT '', NEW.tenant, t.task_type, coalesce(t.agent, ''), 'latency',
        (SELECT CAST(count(*) AS TEXT) FROM aq_metric_buckets
         WHERE le < (NEW.at - t.created_at) / 1e6), 1, (NEW.at - t.created_at) / 1e6
    FROM aq_tasks t WHERE t.id = NEW.task_id AND NOT EXISTS (SELECT 1 FROM aq_events p
                      WHERE p.task_id = NEW.task_id AND p.seq < NEW.seq AND p.action = 'claim')
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

CREATE TRIGGER aq_events_metrics_retry AFTER INSERT ON aq_events
WHEN NEW.to_state IN ('retrying', 'queued') AND json_extract(NEW.data, '$.retry') IS NOT NULL
BEGIN
    INSERT INTO aq_metric_counts (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT '', NEW.tenant, t.task_type, coalesce(t.agent, ''), 'retry',
        '', 1, 0.0
    FROM aq_tasks t WHERE t.id = NEW.task_id
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

CREATE TRIGGER aq_events_metrics_lapse AFTER INSERT ON aq_events
WHEN NEW.action = 'lease_expired'
BEGIN
    INSERT INTO aq_metric_counts (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT '', NEW.tenant, t.task_type, coalesce(t.agent, ''), 'lapse',
        CASE WHEN json_extract(NEW.data, '$.timeout') IS 1 THEN 'timeout' ELSE 'heartbeat' END, 1, 0.0
    FROM aq_tasks t WHERE t.id = NEW.task_id
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

-- Each worker's slots, written with its heartbeat: who is alive and how busy.
CREATE TABLE aq_workers (
    name         TEXT PRIMARY KEY,
    slots        INTEGER NOT NULL,
    busy         INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
