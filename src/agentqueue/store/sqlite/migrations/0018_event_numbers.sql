-- Events numbered as they are written (R24), not by the anchoring step: each insert gives its
-- events the next numbers after the highest (one writer at a time, so none is taken twice), so
-- anchoring no longer rewrites every event row.

-- The events not yet numbered, numbered once as the anchoring step did (at, task_id, seq). The
-- append-only guard of 0015 still lets exactly this through (gseq from empty to a number).
UPDATE aq_events SET gseq = n.base + n.rn
FROM (SELECT task_id, seq, row_number() OVER (ORDER BY at, task_id, seq) AS rn,
             (SELECT coalesce(max(gseq), 0) FROM aq_events) AS base
      FROM aq_events WHERE gseq IS NULL) AS n
WHERE aq_events.task_id = n.task_id AND aq_events.seq = n.seq;

DROP INDEX aq_events_unnumbered;

-- Now nothing may update an event at all (no exception for numbering any more).
DROP TRIGGER aq_events_no_update;
CREATE TRIGGER aq_events_no_update BEFORE UPDATE ON aq_events
BEGIN
    SELECT RAISE(ABORT, 'aq_events is append-only: UPDATE refused');
END;
