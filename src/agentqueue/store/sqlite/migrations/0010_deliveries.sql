-- Callbacks and replies on the issue (R17): a deliverer's lease on a delivery (its token fences
-- what that deliverer may record), deliveries given up, and every try kept. Times are integer
-- microseconds.
ALTER TABLE aq_outbox ADD COLUMN lease_token TEXT;
ALTER TABLE aq_outbox ADD COLUMN given_up_at INTEGER;
ALTER TABLE aq_outbox ADD COLUMN last_status INTEGER;

DROP INDEX aq_outbox_due;
CREATE INDEX aq_outbox_due ON aq_outbox (kind, next_attempt_at)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;
CREATE INDEX aq_outbox_task ON aq_outbox (task_id);
CREATE INDEX aq_outbox_leased ON aq_outbox (lease_token) WHERE lease_token IS NOT NULL;

CREATE TABLE aq_delivery_attempts (
    id          INTEGER PRIMARY KEY,
    outbox_id   INTEGER NOT NULL REFERENCES aq_outbox (id) ON DELETE CASCADE,
    at          INTEGER NOT NULL,
    status_code INTEGER,
    duration_ms REAL NOT NULL,
    error       TEXT
);
CREATE INDEX aq_delivery_attempts_outbox ON aq_delivery_attempts (outbox_id, id);
