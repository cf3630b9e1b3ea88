-- Leadership (R21) and pausing (SQLite).

-- name: lead
-- Take or renew a leadership lease; returns the term when it holds.
-- Take or renew the lease of a leadership: it holds when the row is ours or has expired. A new
-- holder starts a new term.
INSERT INTO aq_leader AS l (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES (:name, :holder, 1, :now, :now, :expires_at)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    term = CASE WHEN l.holder = excluded.holder THEN l.term ELSE l.term + 1 END,
    acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at
                       ELSE excluded.acquired_at END,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at
WHERE l.holder = excluded.holder OR l.expires_at <= excluded.renewed_at
RETURNING term

-- name: resign
-- End a leadership lease now.
-- The lease ends now (the row stays, so terms keep counting up).
UPDATE aq_leader SET expires_at = renewed_at WHERE name = :name AND holder = :holder

-- name: leader
-- Who holds (or last held) a leadership.
SELECT name, holder, term, acquired_at, renewed_at, expires_at FROM aq_leader
WHERE name = :name

-- name: pause
-- Pause a task type (no-op if paused).
INSERT INTO aq_paused (task_type, paused_at, paused_by, reason)
VALUES (:task_type, :now, :by, :reason)
ON CONFLICT (task_type) DO NOTHING

-- name: resume
-- Undo the pause of a task type.
DELETE FROM aq_paused WHERE task_type = :task_type

-- name: paused
-- Every paused task type.
SELECT task_type, paused_at, paused_by, reason FROM aq_paused ORDER BY task_type
