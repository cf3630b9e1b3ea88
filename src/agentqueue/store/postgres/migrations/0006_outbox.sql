-- Dead letter retention and alerts (R8).

-- Deliveries to make, each written in the transaction of the change that calls for it (kind
-- 'alert': a P0 task entered dead_letter), so none is lost and none is raised twice: one per
-- (kind, task, audit position). A deliverer leases a row by moving next_attempt_at ahead.
CREATE TABLE aq_outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text NOT NULL,
    task_id         uuid NOT NULL,
    event_seq       integer NOT NULL,
    tenant          text NOT NULL,
    url             text,  -- NULL: the alert webhook configured when it is sent
    body            jsonb NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    delivered_at    timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL,
    UNIQUE (kind, task_id, event_seq)
);
CREATE INDEX aq_outbox_due ON aq_outbox (kind, next_attempt_at) WHERE delivered_at IS NULL;

-- Retention finds dead letters by when they entered dead_letter (their updated_at).
CREATE INDEX aq_tasks_dead_letters ON aq_tasks (updated_at) WHERE state = 'dead_letter';
