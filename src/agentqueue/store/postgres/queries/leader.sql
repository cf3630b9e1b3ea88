-- Leadership (R21) and pausing (PostgreSQL).

-- name: lead
-- Take or renew a leadership lease; returns the term when it holds.
-- Take or renew the lease of a leadership: it holds when the row is ours or has expired. A new
-- holder starts a new term.
INSERT INTO aq_leader AS l (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES (%(name)s, %(holder)s, 1, %(now)s, %(now)s, %(expires_at)s)
ON CONFLICT (name) DO UPDATE SET
    holder = EXCLUDED.holder,
    term = CASE WHEN l.holder = EXCLUDED.holder THEN l.term ELSE l.term + 1 END,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at
                       ELSE EXCLUDED.acquired_at END,
    renewed_at = EXCLUDED.renewed_at,
    expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= EXCLUDED.renewed_at
RETURNING term

-- name: resign
-- End a leadership lease now.
-- The lease ends now (the row stays, so terms keep counting up).
UPDATE aq_leader SET expires_at = renewed_at WHERE name = %(name)s AND holder = %(holder)s

-- name: leader
-- Who holds (or last held) a leadership.
SELECT name, holder, term, acquired_at, renewed_at, expires_at FROM aq_leader
WHERE name = %(name)s

-- name: pause
-- Pause a task type (no-op if paused).
INSERT INTO aq_paused (task_type, paused_at, paused_by, reason)
VALUES (%(task_type)s, %(now)s, %(by)s, %(reason)s)
ON CONFLICT (task_type) DO NOTHING

-- name: resume
-- Undo the pause of a task type.
DELETE FROM aq_paused WHERE task_type = %(task_type)s RETURNING task_type

-- name: paused
-- Every paused task type.
SELECT task_type, paused_at, paused_by, reason FROM aq_paused ORDER BY task_type
