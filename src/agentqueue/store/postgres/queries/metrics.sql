-- Prometheus metrics (R19): the rollup's sums and the gauges, read at scrape (PostgreSQL).
-- The depth is summed from the rollup; every other gauge reads a small table or the head of a
-- partial index, so a scrape stays cheap with millions of tasks in the table.

-- name: metric_counts
-- Counters and histogram buckets summed over every writer.
SELECT tenant, task_type, agent, metric, label, sum(n)::bigint AS n, sum(total) AS total
FROM aq_metric_counts
WHERE metric <> 'depth'
GROUP BY tenant, task_type, agent, metric, label

-- name: metric_depth
-- Tasks in each live state.
-- Summed from the rollup the trigger keeps (migration 0012): counting a large backlog at every
-- scrape would take far longer.
SELECT '' AS tenant, label AS state, sum(n)::bigint AS count FROM aq_metric_counts
WHERE metric = 'depth'
GROUP BY label

-- name: metric_depth_by_tenant
-- Tasks in each live state, per tenant.
SELECT tenant, label AS state, sum(n)::bigint AS count FROM aq_metric_counts
WHERE metric = 'depth'
GROUP BY tenant, label

-- name: metric_oldest_queued
-- When the longest-waiting queued task became eligible: the head of each priority level.
SELECT min(h.eligible_at) AS since FROM generate_series(0, 9) AS lv(priority)
CROSS JOIN LATERAL (
    SELECT eligible_at FROM aq_tasks
    WHERE state = 'queued' AND priority = lv.priority
    ORDER BY eligible_at, seq LIMIT 1
) h

-- name: metric_outbox
-- Deliveries still to make, by kind.
SELECT kind, count(*) AS count FROM aq_outbox
WHERE delivered_at IS NULL AND given_up_at IS NULL
GROUP BY kind

-- name: metric_leader
-- The highest leader term.
SELECT coalesce(max(term), 0) AS term FROM aq_leader

-- name: metric_workers
-- Every worker's slots as of its last heartbeat.
SELECT name, slots, busy, heartbeat_at FROM aq_workers ORDER BY name

-- name: record_worker
-- Keep a worker's slots with its heartbeat.
INSERT INTO aq_workers (name, slots, busy, started_at, heartbeat_at)
VALUES (%(name)s, %(slots)s, %(busy)s, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET slots = EXCLUDED.slots, busy = EXCLUDED.busy,
    heartbeat_at = EXCLUDED.heartbeat_at

-- name: forget_worker
-- A worker that stopped leaves the table.
DELETE FROM aq_workers WHERE name = %(name)s

-- name: compact_metrics
-- Fold the rollup rows of connections that are gone into one row per key; how many were folded.
-- The rollup keys its rows by the writing connection (its backend pid), so writers never wait
-- on one row; a pid that no server process has any more writes nothing again, and its rows are
-- summed into the writer 'compacted'. A pid taken again by a new connection keeps its rows
-- until that one is gone too. Sums are unchanged by it, so every scrape reads the same figures;
-- without it the table grows with every connection a pool ever opened.
WITH gone AS (
    DELETE FROM aq_metric_counts m
    WHERE m.writer NOT IN ('compacted', 'migration')
      AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid::text = m.writer)
    RETURNING tenant, task_type, agent, metric, label, n, total
), folded AS (
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT 'compacted', tenant, task_type, agent, metric, label, sum(n), sum(total)
    FROM gone
    GROUP BY tenant, task_type, agent, metric, label
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total
)
SELECT count(*) AS folded FROM gone
