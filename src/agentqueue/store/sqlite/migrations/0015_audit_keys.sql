-- Tamper evidence against someone with the database itself (R24). The keyed hash is the
-- domain's chain_hash() registered on each connection (aq_event_hash), keyed by the process.
--
-- A global, gap-free sequence of every event: writers leave gseq empty; the anchoring step
-- numbers the events not yet numbered, and the append-only guard lets exactly that through.
ALTER TABLE aq_events ADD COLUMN gseq INTEGER;
CREATE UNIQUE INDEX aq_events_gseq ON aq_events (gseq) WHERE gseq IS NOT NULL;
CREATE INDEX aq_events_unnumbered ON aq_events (at, task_id, seq) WHERE gseq IS NULL;

DROP TRIGGER aq_events_no_update;
CREATE TRIGGER aq_events_no_update BEFORE UPDATE ON aq_events
WHEN NOT (OLD.gseq IS NULL AND NEW.gseq IS NOT NULL
          AND NEW.task_id = OLD.task_id AND NEW.seq = OLD.seq AND NEW.tenant = OLD.tenant
          AND NEW.at = OLD.at AND NEW.from_state IS OLD.from_state
          AND NEW.to_state = OLD.to_state AND NEW.action = OLD.action
          AND NEW.actor = OLD.actor AND NEW.reason = OLD.reason AND NEW.data = OLD.data
          AND NEW.hash = OLD.hash)
BEGIN
    SELECT RAISE(ABORT, 'aq_events is append-only: UPDATE refused');
END;

-- Anchors: the count of numbered events and a running hash over every one of them in sequence,
-- signed with the key; a copy of each goes to a file outside the database. A purge records the
-- chains it closed the same way (kind 'purge', data: their task ids).
CREATE TABLE aq_audit_anchors (
    id      INTEGER PRIMARY KEY,
    kind    TEXT NOT NULL,
    at      INTEGER NOT NULL,
    count   INTEGER NOT NULL,
    digest  TEXT NOT NULL,
    data    TEXT NOT NULL,
    mac     TEXT NOT NULL
);

CREATE TRIGGER aq_audit_anchors_no_update BEFORE UPDATE ON aq_audit_anchors
BEGIN
    SELECT RAISE(ABORT, 'aq_audit_anchors is append-only: UPDATE refused');
END;

CREATE TRIGGER aq_audit_anchors_no_delete BEFORE DELETE ON aq_audit_anchors
BEGIN
    SELECT RAISE(ABORT, 'aq_audit_anchors is append-only: DELETE refused');
END;
