-- The audit trail as a whole, for verification (PostgreSQL).

-- name: task_heads
-- Every task head, by id, for verification.
-- With the fields its head event signs, as text exactly as the row_mac was taken over (R24).
SELECT id, tenant, event_seq, last_hash, state, priority, payload::text AS payload,
       result::text AS result, assigned_to, approved_by, retry_count
FROM aq_tasks ORDER BY id

-- name: all_events
-- Every event, by task and position, data as stored text.
SELECT task_id, seq, tenant, at, from_state, to_state, action, actor, reason, data::text AS data,
       hash, gseq, row_mac
FROM aq_events ORDER BY task_id, seq

-- name: event_numbers
-- Every numbered event, by its place in the global sequence (R24).
SELECT gseq, task_id, seq, hash FROM aq_events WHERE gseq IS NOT NULL ORDER BY gseq

-- name: audit_anchors
-- Every anchor and purge record, oldest first.
SELECT id, kind, at, count, digest, data, mac FROM aq_audit_anchors ORDER BY id

-- name: audit_guards
-- Each append-only trigger of the audit tables and its state ('O' or 'A' fire; 'D' disabled,
-- 'R' only on replicas; none: dropped).
SELECT x.name, t.tgenabled::text AS enabled
FROM (VALUES ('aq_events_no_update'), ('aq_events_no_truncate'),
             ('aq_audit_anchors_no_update'), ('aq_audit_anchors_no_truncate')) AS x(name)
LEFT JOIN pg_trigger t ON t.tgname = x.name AND NOT t.tgisinternal
    AND t.tgrelid IN ('aq_events'::regclass, 'aq_audit_anchors'::regclass)
ORDER BY x.name

-- name: lock_anchoring
-- One anchoring step at a time (a transaction-scoped advisory lock).
SELECT pg_advisory_xact_lock(2024112401)

-- name: last_anchor
-- The newest anchor (kind 'anchor').
SELECT id, kind, at, count, digest, data, mac FROM aq_audit_anchors WHERE kind = 'anchor'
ORDER BY id DESC LIMIT 1

-- name: numbers_drawn
-- The highest global number handed out so far (events take theirs as they are written).
SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END AS drawn FROM aq_event_gseq

-- name: event_writers
-- The open transactions that have written (or are writing) events: each holds ROW EXCLUSIVE
-- on aq_events until it ends (prepared transactions too: no pid).
SELECT virtualtransaction AS vxid FROM pg_locks
WHERE locktype = 'relation' AND relation = 'aq_events'::regclass
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND mode = 'RowExclusiveLock' AND granted AND pid IS DISTINCT FROM pg_backend_pid()

-- name: event_writers_left
-- Which of the given transactions that write events are still open.
SELECT virtualtransaction AS vxid FROM pg_locks
WHERE locktype = 'relation' AND relation = 'aq_events'::regclass
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND mode = 'RowExclusiveLock' AND granted AND virtualtransaction = ANY(%(vxids)s)

-- name: events_hashed
-- How many events have global numbers in after+1 .. upto, and their hashes joined in number order.
-- One row however many events: the anchoring step folds them without a row each (hashes are hex,
-- so no comma is theirs; one that were would make the count disagree, and the rows be read).
SELECT count(*) AS n, string_agg(hash, ',' ORDER BY gseq) AS hashes
FROM aq_events WHERE gseq > %(after)s AND gseq <= %(upto)s

-- name: events_numbered
-- The events with global numbers in after+1 .. upto, in order.
SELECT gseq, hash FROM aq_events WHERE gseq > %(after)s AND gseq <= %(upto)s ORDER BY gseq

-- name: add_anchor
-- Record an anchor or a purge record.
INSERT INTO aq_audit_anchors (kind, at, count, digest, data, mac)
VALUES (%(kind)s, %(at)s, %(count)s, %(digest)s, %(data)s, %(mac)s)
RETURNING id
