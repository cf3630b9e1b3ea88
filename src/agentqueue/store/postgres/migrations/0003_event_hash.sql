-- The audit hash of domain/audit.py chain_hash(), in SQL, so hot transitions applied to a whole
-- batch in one statement extend each task's chain exactly as Python would: SHA-256 over each
-- field as "<length>:<text>". The tail (time, states, action, actor, reason, data) is the same
-- for every row of a batch, so the caller computes it once with domain.audit.hash_tail().
CREATE FUNCTION aq_event_hash(prev text, task_id uuid, tenant text, seq integer, tail text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN encode(sha256(convert_to(
    length(prev)::text || ':' || prev
    || '36:' || task_id::text
    || length(tenant)::text || ':' || tenant
    || length(seq::text)::text || ':' || seq::text
    || tail,
    'UTF8')), 'hex');
