-- The audit trail as a whole, for verification (SQLite).

-- name: task_heads
-- Every task head, by id, for verification.
-- With the fields its head event signs (R24).
SELECT id, tenant, event_seq, last_hash, state, priority, payload, result, assigned_to,
       approved_by, retry_count
FROM aq_tasks ORDER BY id

-- name: all_events
-- Every event, by task and position, data as stored text.
SELECT * FROM aq_events ORDER BY task_id, seq

-- name: event_numbers
-- Every numbered event, by its place in the global sequence (R24).
SELECT gseq, task_id, seq, hash FROM aq_events WHERE gseq IS NOT NULL ORDER BY gseq

-- name: audit_anchors
-- Every anchor and purge record, oldest first.
SELECT id, kind, at, count, digest, data, mac FROM aq_audit_anchors ORDER BY id

-- name: audit_guards
-- Each append-only trigger of the audit tables, 'O' when present (SQLite cannot disable one; it
-- can only be dropped).
WITH x(name) AS (VALUES ('aq_events_no_update'), ('aq_events_no_delete'),
                        ('aq_audit_anchors_no_update'), ('aq_audit_anchors_no_delete'))
SELECT x.name, CASE WHEN m.name IS NULL THEN NULL ELSE 'O' END AS enabled
FROM x LEFT JOIN sqlite_master m ON m.type = 'trigger' AND m.name = x.name
ORDER BY x.name

-- name: lock_anchoring
-- One writer at a time already (the write transaction): nothing more to take.
SELECT 1

-- name: last_anchor
-- The newest anchor (kind 'anchor').
SELECT id, kind, at, count, digest, data, mac FROM aq_audit_anchors WHERE kind = 'anchor'
ORDER BY id DESC LIMIT 1

-- name: numbers_drawn
-- The highest global number of a committed event. One writer at a time: a write under way can
-- only take higher ones.
SELECT coalesce(max(gseq), 0) AS drawn FROM aq_events WHERE gseq IS NOT NULL

-- name: events_numbered
-- The events with global numbers in after+1 .. upto, in order.
SELECT gseq, hash FROM aq_events WHERE gseq > :after AND gseq <= :upto ORDER BY gseq

-- name: add_anchor
-- Record an anchor or a purge record.
INSERT INTO aq_audit_anchors (kind, at, count, digest, data, mac)
VALUES (:kind, :at, :count, :digest, :data, :mac)
RETURNING id
