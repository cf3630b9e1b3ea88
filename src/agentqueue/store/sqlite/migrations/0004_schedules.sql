-- Cron schedules (R18): each row submits a task per slot of its cron expression in its time zone.
-- Times are integer microseconds since the Unix epoch (UTC); the task template is JSON text.

CREATE TABLE aq_schedules (
    tenant        TEXT NOT NULL,
    name          TEXT NOT NULL,
    cron          TEXT NOT NULL,
    tz            TEXT NOT NULL,
    task          TEXT NOT NULL,
    catch_up      TEXT NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'once')),
    next_at       INTEGER NOT NULL,  -- the first slot not yet fired or skipped
    last_slot_at  INTEGER,           -- the latest slot that fired
    last_fired_at INTEGER,           -- when it fired
    created_by    TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

-- The firing step reads only what is due, so an idle scheduler tick costs one index probe.
CREATE INDEX aq_schedules_due ON aq_schedules (next_at);
