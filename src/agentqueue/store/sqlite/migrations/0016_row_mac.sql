-- The task row's fields that matter, covered by its head event (R24): each event carries
-- row_mac, the keyed hash of its own hash and of the task row as the statement left it
-- (state, priority, payload, result, assigned_to, approved_by, retry_count), computed by
-- aq_row_mac(), the domain's row_mac() registered on the connection. Empty for the events before
-- this migration and for purge events (no row).
ALTER TABLE aq_events ADD COLUMN row_mac TEXT;
