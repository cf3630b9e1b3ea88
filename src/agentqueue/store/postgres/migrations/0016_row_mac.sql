-- The task row's fields that matter, covered by its head event (R24): each event carries
-- row_mac, the keyed hash of its own hash and of the task row as the statement left it
-- (state, priority, payload, result, assigned_to, approved_by, retry_count: the fields that
-- change only together with an event). verify recomputes it from the row as read, so a row
-- edited behind the queue's back no longer matches its head event. Written for head events;
-- empty for the events before this migration and for purge events (no row).
ALTER TABLE aq_events ADD COLUMN row_mac text;

CREATE FUNCTION aq_row_mac(hash text, state text, priority integer, payload text, result text,
                           assigned_to text, approved_by text, retry_count integer)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN aq_keyed_hex(convert_to(
    length(hash)::text || ':' || hash
    || length(state)::text || ':' || state
    || length(priority::text)::text || ':' || priority::text
    || length(payload)::text || ':' || payload
    || CASE WHEN result IS NULL THEN '~' ELSE length(result)::text || ':' || result END
    || CASE WHEN assigned_to IS NULL THEN '~'
            ELSE length(assigned_to)::text || ':' || assigned_to END
    || CASE WHEN approved_by IS NULL THEN '~'
            ELSE length(approved_by)::text || ':' || approved_by END
    || length(retry_count::text)::text || ':' || retry_count::text,
    'UTF8'));
