-- Prometheus metrics (R19): the rollup's sums and the gauges, read at scrape (PostgreSQL).
-- Each gauge is a count over a partial index or a small table, so a scrape stays cheap with
-- millions of tasks in the table.

-- name: metric_counts
-- Counters and histogram buckets summed over every writer.
SELECT tenant, task_type, agent, metric, label, sum(n)::bigint AS n, sum(total) AS total
FROM aq_metric_counts
GROUP BY tenant, task_type, agent, metric, label

-- name: metric_depth
-- Tasks in each live state.
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
