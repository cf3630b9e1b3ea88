-- Events numbered as they are written (R24), not by the anchoring step: gseq takes the next
-- value of a sequence, so anchoring no longer rewrites every event row.
--
-- The numbers can have gaps (a transaction that rolled back, a value drawn and never used).
-- The anchoring step settles a point H of the sequence (every transaction that could hold a
-- number up to H has ended) and signs, with the events up to H, the list of numbers up to H
-- that have no event: verify then holds every number to be an event or a signed gap.

-- No insert between numbering the events of before and starting the sequence after them.
LOCK TABLE aq_events IN SHARE ROW EXCLUSIVE MODE;

-- The events not yet numbered, numbered once as the anchoring step did (at, task_id, seq).
-- The append-only guard of 0015 still lets exactly this through (gseq from empty to a number).
UPDATE aq_events e SET gseq = b.base + n.rn
FROM (SELECT task_id, seq, row_number() OVER (ORDER BY at, task_id, seq) AS rn
      FROM aq_events WHERE gseq IS NULL) AS n,
     (SELECT coalesce(max(gseq), 0) AS base FROM aq_events) AS b
WHERE e.task_id = n.task_id AND e.seq = n.seq;

-- CACHE 1 (the default) matters: the anchoring step relies on each value being drawn from the
-- one shared counter, in order.
CREATE SEQUENCE aq_event_gseq AS bigint CACHE 1 OWNED BY aq_events.gseq;
SELECT setval('aq_event_gseq', coalesce(max(gseq), 0) + 1, false) FROM aq_events;
ALTER TABLE aq_events ALTER COLUMN gseq SET DEFAULT nextval('aq_event_gseq');
ALTER TABLE aq_events ALTER COLUMN gseq SET NOT NULL;
DROP INDEX aq_events_unnumbered;

-- Now nothing may update an event at all (no exception for numbering any more), which is also
-- cheaper: no row is turned into JSON twice per update.
CREATE OR REPLACE FUNCTION aq_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END
$$;
