-- What the dashboard's overview reads: throughput, latencies, busy workers, the outbox backlog.
-- Times are integer microseconds since the Unix epoch.

-- name: ended_counts
-- Tasks that ended since a time, counted per time slot of bucket_secs seconds and per state.
SELECT (finished_at - :since) / CAST(:bucket_secs * 1000000 AS INTEGER) AS slot,
       state, count(*) AS count
FROM aq_tasks
WHERE finished_at >= :since AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY 1, 2

-- name: ended_sample
-- The newest tasks that ran and ended since a time: their creation, start and end.
SELECT created_at, started_at, finished_at FROM aq_tasks
WHERE finished_at >= :since AND started_at IS NOT NULL
  AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY finished_at DESC
LIMIT :limit

-- name: busy_workers
-- Each worker holding executing tasks: how many, and its latest heartbeat on any of them.
SELECT assigned_to AS worker, count(*) AS executing, max(heartbeat_at) AS last_heartbeat
FROM aq_tasks
WHERE state = 'executing' AND assigned_to IS NOT NULL
GROUP BY assigned_to
ORDER BY assigned_to

-- name: outbox_backlog
-- Deliveries neither delivered nor given up.
SELECT count(*) AS count FROM aq_outbox
WHERE delivered_at IS NULL AND given_up_at IS NULL
  AND (:tenant IS NULL OR tenant = :tenant)
