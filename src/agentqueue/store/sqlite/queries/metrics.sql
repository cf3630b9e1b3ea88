-- Prometheus metrics (R19): the rollup's sums and the gauges, read at scrape (SQLite).
-- Each gauge is a count over an index or a small table.

-- name: metric_counts
-- Counters and histogram buckets summed over every writer.
SELECT tenant, task_type, agent, metric, label, sum(n) AS n, sum(total) AS total
FROM aq_metric_counts
WHERE metric <> 'depth'
GROUP BY tenant, task_type, agent, metric, label

-- name: metric_depth
-- Tasks in each live state.
-- Counted at scrape over the state index (SQLite is one file, read in-process; PostgreSQL sums
-- the rollup its trigger keeps instead).
SELECT '' AS tenant, state, count(*) AS count FROM aq_tasks
WHERE state IN ('pending', 'blocked', 'queued', 'executing', 'waiting_tool', 'retrying',
                'dead_letter', 'manual_review')
GROUP BY state

-- name: metric_depth_by_tenant
-- Tasks in each live state, per tenant.
SELECT tenant, state, count(*) AS count FROM aq_tasks
WHERE state IN ('pending', 'blocked', 'queued', 'executing', 'waiting_tool', 'retrying',
                'dead_letter', 'manual_review')
GROUP BY tenant, state

-- name: metric_oldest_queued
-- When the longest-waiting queued task became eligible.
SELECT min(eligible_at) AS since FROM aq_tasks WHERE state = 'queued'

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
VALUES (:name, :slots, :busy, :now, :now)
ON CONFLICT (name) DO UPDATE SET slots = EXCLUDED.slots, busy = EXCLUDED.busy,
    heartbeat_at = EXCLUDED.heartbeat_at

-- name: forget_worker
-- A worker that stopped leaves the table.
DELETE FROM aq_workers WHERE name = :name

-- name: compact_metrics
-- Fold the rollup rows of connections that are gone; how many were folded.
-- SQLite's rollup has one writer (''), so there is never anything to fold.
SELECT 0 AS folded
