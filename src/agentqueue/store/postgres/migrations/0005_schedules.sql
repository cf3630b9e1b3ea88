-- Cron schedules (R18): each row submits a task per slot of its cron expression in its time zone.

CREATE TABLE aq_schedules (
    tenant        text NOT NULL,
    name          text NOT NULL,
    cron          text NOT NULL,
    tz            text NOT NULL,
    task          jsonb NOT NULL,
    catch_up      text NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'once')),
    next_at       timestamptz NOT NULL,  -- the first slot not yet fired or skipped
    last_slot_at  timestamptz,           -- the latest slot that fired
    last_fired_at timestamptz,           -- when it fired
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- The firing step reads only what is due, so an idle scheduler tick costs one index probe.
CREATE INDEX aq_schedules_due ON aq_schedules (next_at);
