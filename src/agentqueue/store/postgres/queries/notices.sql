-- Notices: NOTIFY and LISTEN (PostgreSQL).

-- name: notify
-- Send a notice on a channel (at commit, inside a transaction).
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: listen
-- Listen on a channel (its name formatted in as an identifier).
LISTEN {channel}
