-- Tasks (SPEC section 1) and their append-only, hash-chained audit events (R3).

CREATE TABLE aq_tasks (
    id               uuid PRIMARY KEY,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    tenant           text NOT NULL,
    source           text NOT NULL,
    source_id        text,
    title            text NOT NULL,
    task_type        text NOT NULL,
    payload          jsonb NOT NULL,
    priority         smallint NOT NULL CHECK (priority BETWEEN 0 AND 9),
    state            text NOT NULL CHECK (state IN (
                         'pending', 'blocked', 'queued', 'executing', 'waiting_tool', 'retrying',
                         'completed', 'failed', 'dead_letter', 'manual_review', 'archived',
                         'cancelled')),
    state_reason     text,
    max_retries      smallint NOT NULL CHECK (max_retries >= 0),
    retry_count      smallint NOT NULL DEFAULT 0,
    timeout_secs     integer NOT NULL CHECK (timeout_secs > 0),
    lock_token       uuid,
    locked_at        timestamptz,
    heartbeat_at     timestamptz,
    lease_expires_at timestamptz,
    assignee         text,
    assigned_to      text,
    depends_on       uuid[] NOT NULL DEFAULT '{}',
    idempotency_key  text,
    callback_url     text,
    checkpoint       jsonb,
    tool_calls       jsonb NOT NULL DEFAULT '[]',
    result           jsonb,
    error            text,
    requested_by     text NOT NULL,
    approved_by      text,
    run_after        timestamptz,
    eligible_at      timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    event_seq        integer NOT NULL,
    last_hash        text NOT NULL
);

-- R2: at most one live task per (tenant, source, source_id).
CREATE UNIQUE INDEX aq_tasks_live_source ON aq_tasks (tenant, source, source_id)
    WHERE source_id IS NOT NULL
      AND state NOT IN ('completed', 'failed', 'cancelled', 'archived');

-- R2: the same idempotency_key within a tenant is the same task, for good.
CREATE UNIQUE INDEX aq_tasks_idempotency ON aq_tasks (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Claim and admission read the head of each priority level (R4) from these.
CREATE INDEX aq_tasks_queued ON aq_tasks (priority, eligible_at, seq) WHERE state = 'queued';
CREATE INDEX aq_tasks_pending ON aq_tasks (priority, eligible_at, seq) WHERE state = 'pending';
CREATE INDEX aq_tasks_leases ON aq_tasks (lease_expires_at) WHERE state = 'executing';
CREATE INDEX aq_tasks_retrying ON aq_tasks (run_after) WHERE state = 'retrying';
CREATE INDEX aq_tasks_listing ON aq_tasks (tenant, seq);
CREATE INDEX aq_tasks_state ON aq_tasks (state, seq);

-- The queue table churns: vacuum it early and leave room for HOT updates.
ALTER TABLE aq_tasks SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

CREATE TABLE aq_events (
    task_id    uuid NOT NULL,
    seq        integer NOT NULL,
    tenant     text NOT NULL,
    at         timestamptz NOT NULL,
    from_state text,
    to_state   text NOT NULL,
    action     text NOT NULL,
    actor      text NOT NULL,
    reason     text NOT NULL,
    data       json NOT NULL,  -- json, not jsonb: the exact text the hash was taken over
    hash       text NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE FUNCTION aq_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'aq_events is append-only: % refused', TG_OP;
END
$$;

CREATE TRIGGER aq_events_no_update BEFORE UPDATE OR DELETE ON aq_events
    FOR EACH ROW EXECUTE FUNCTION aq_events_append_only();
CREATE TRIGGER aq_events_no_truncate BEFORE TRUNCATE ON aq_events
    FOR EACH STATEMENT EXECUTE FUNCTION aq_events_append_only();
