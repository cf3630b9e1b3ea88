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

-- name: unnumbered_events
-- The events not yet in the global sequence, in the order they are numbered.
SELECT task_id, seq, hash FROM aq_events WHERE gseq IS NULL ORDER BY at, task_id, seq
LIMIT :limit

-- name: last_anchor
-- The newest anchor (kind 'anchor').
SELECT id, kind, at, count, digest, data, mac FROM aq_audit_anchors WHERE kind = 'anchor'
ORDER BY id DESC LIMIT 1

-- name: number_events
-- Give events their global numbers.
UPDATE aq_events SET gseq = v.value ->> 'gseq'
FROM json_each(:rows) AS v
WHERE aq_events.task_id = v.value ->> 'task_id' AND aq_events.seq = v.value ->> 'seq'
  AND aq_events.gseq IS NULL

-- name: add_anchor
-- Record an anchor or a purge record.
INSERT INTO aq_audit_anchors (kind, at, count, digest, data, mac)
VALUES (:kind, :at, :count, :digest, :data, :mac)
RETURNING id
