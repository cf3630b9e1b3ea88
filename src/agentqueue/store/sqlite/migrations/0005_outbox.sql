-- Dead letter retention and alerts (R8). Times are integer microseconds.

-- Deliveries to make, each written in the transaction of the change that calls for it (kind
-- 'alert': a P0 task entered dead_letter), so none is lost and none is raised twice: one per
-- (kind, task, audit position). A deliverer leases a row by moving next_attempt_at ahead.
CREATE TABLE aq_outbox (
    id              INTEGER PRIMARY KEY,
    kind            TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    event_seq       INTEGER NOT NULL,
    tenant          TEXT NOT NULL,
    url             TEXT,  -- NULL: the alert webhook configured when it is sent
    body            TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    delivered_at    INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    UNIQUE (kind, task_id, event_seq)
);
CREATE INDEX aq_outbox_due ON aq_outbox (kind, next_attempt_at) WHERE delivered_at IS NULL;

-- Retention finds dead letters by when they entered dead_letter (their updated_at).
CREATE INDEX aq_tasks_dead_letters ON aq_tasks (updated_at) WHERE state = 'dead_letter';
