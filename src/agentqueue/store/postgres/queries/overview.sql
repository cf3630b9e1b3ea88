-- What the dashboard's overview reads: throughput, latencies, busy workers, the outbox backlog.

-- name: ended_counts
-- Tasks that ended since a time, counted per time slot of bucket_secs seconds and per state.
SELECT floor(extract(epoch FROM finished_at - %(since)s) / %(bucket_secs)s)::integer AS slot,
       state, count(*) AS count
FROM aq_tasks
WHERE finished_at >= %(since)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
GROUP BY 1, 2

-- name: ended_sample
-- The newest tasks that ran and ended since a time: their creation, start and end.
SELECT created_at, started_at, finished_at FROM aq_tasks
WHERE finished_at >= %(since)s AND started_at IS NOT NULL
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY finished_at DESC
LIMIT %(limit)s

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
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
