-- Tamper evidence against someone with the database itself (R24).
--
-- 1. Keyed hashes. aq_event_hash() takes the HMAC-SHA256 of the same material when the session
--    carries a key (setting agentqueue.audit_key = '<key id>:<ipad hex>:<opad hex>', given by
--    the process at connection start; the key itself is never stored in the database):
--    sha256(opad || sha256(ipad || message)), written '<key id>:<hex>' so verify knows the key
--    (and an old key after a rotation). Without the setting: the plain SHA-256 as before.
CREATE FUNCTION aq_keyed_hex(msg bytea) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE
    WHEN coalesce(current_setting('agentqueue.audit_key', true), '') = ''
        THEN encode(sha256(msg), 'hex')
    ELSE split_part(current_setting('agentqueue.audit_key'), ':', 1) || ':' || encode(sha256(
        decode(split_part(current_setting('agentqueue.audit_key'), ':', 3), 'hex')
        || sha256(decode(split_part(current_setting('agentqueue.audit_key'), ':', 2), 'hex')
                  || msg)), 'hex')
END;

CREATE OR REPLACE FUNCTION aq_event_hash(prev text, task_id uuid, tenant text, seq integer,
                                         tail text)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN aq_keyed_hex(convert_to(
    length(prev)::text || ':' || prev
    || '36:' || task_id::text
    || length(tenant)::text || ':' || tenant
    || length(seq::text)::text || ':' || seq::text
    || tail,
    'UTF8'));

-- 2. A global, gap-free sequence of every event. Writers leave gseq empty (no counter every
--    writer would queue on); the anchoring step numbers the events not yet numbered, one
--    process at a time, and the append-only guard lets exactly that through: gseq from empty
--    to a number, nothing else changed.
ALTER TABLE aq_events ADD COLUMN gseq bigint;
CREATE UNIQUE INDEX aq_events_gseq ON aq_events (gseq) WHERE gseq IS NOT NULL;
CREATE INDEX aq_events_unnumbered ON aq_events (at, task_id, seq) WHERE gseq IS NULL;

CREATE OR REPLACE FUNCTION aq_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.gseq IS NULL AND NEW.gseq IS NOT NULL
       AND (to_jsonb(NEW) - 'gseq') = (to_jsonb(OLD) - 'gseq')
       AND NEW.data::text = OLD.data::text THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'aq_events is append-only: % refused', TG_OP;
END
$$;

-- 3. Anchors: the count of numbered events and a running hash over every one of them in
--    sequence (so over every chain's head at that point), signed with the key; a copy of
--    each goes to a file outside the database. A purge records the chains it closed the same
--    way (kind 'purge', data: their task ids).
CREATE TABLE aq_audit_anchors (
    id      bigserial PRIMARY KEY,
    kind    text NOT NULL,
    at      timestamptz NOT NULL,
    count   bigint NOT NULL,
    digest  text NOT NULL,
    data    text NOT NULL,
    mac     text NOT NULL
);

CREATE TRIGGER aq_audit_anchors_no_update BEFORE UPDATE OR DELETE ON aq_audit_anchors
    FOR EACH ROW EXECUTE FUNCTION aq_events_append_only();
CREATE TRIGGER aq_audit_anchors_no_truncate BEFORE TRUNCATE ON aq_audit_anchors
    FOR EACH STATEMENT EXECUTE FUNCTION aq_events_append_only();
