-- Tasks (SPEC section 1) and their append-only, hash-chained audit events (R3).
-- Times are integer microseconds since the Unix epoch (UTC); JSON is stored as text.

CREATE TABLE aq_tasks (
    seq              INTEGER PRIMARY KEY,  -- the rowid: submission order
    id               TEXT NOT NULL UNIQUE,
    tenant           TEXT NOT NULL,
    source           TEXT NOT NULL,
    source_id        TEXT,
    title            TEXT NOT NULL,
    task_type        TEXT NOT NULL,
    payload          TEXT NOT NULL,
    priority         INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 9),
    state            TEXT NOT NULL CHECK (state IN (
                         'pending', 'blocked', 'queued', 'executing', 'waiting_tool', 'retrying',
                         'completed', 'failed', 'dead_letter', 'manual_review', 'archived',
                         'cancelled')),
    state_reason     TEXT,
    max_retries      INTEGER NOT NULL CHECK (max_retries >= 0),
    retry_count      INTEGER NOT NULL DEFAULT 0,
    timeout_secs     INTEGER NOT NULL CHECK (timeout_secs > 0),
    lock_token       TEXT,
    locked_at        INTEGER,
    heartbeat_at     INTEGER,
    lease_expires_at INTEGER,
    assignee         TEXT,
    assigned_to      TEXT,
    depends_on       TEXT NOT NULL DEFAULT '[]',
    idempotency_key  TEXT,
    callback_url     TEXT,
    checkpoint       TEXT,
    tool_calls       TEXT NOT NULL DEFAULT '[]',
    result           TEXT,
    error            TEXT,
    requested_by     TEXT NOT NULL,
    approved_by      TEXT,
    run_after        INTEGER,
    eligible_at      INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    event_seq        INTEGER NOT NULL,
    last_hash        TEXT NOT NULL
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

CREATE TABLE aq_events (
    task_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    tenant     TEXT NOT NULL,
    at         INTEGER NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    action     TEXT NOT NULL,
    actor      TEXT NOT NULL,
    reason     TEXT NOT NULL,
    data       TEXT NOT NULL,
    hash       TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;

CREATE TRIGGER aq_events_no_update BEFORE UPDATE ON aq_events
BEGIN
    SELECT RAISE(ABORT, 'aq_events is append-only: UPDATE refused');
END;

CREATE TRIGGER aq_events_no_delete BEFORE DELETE ON aq_events
BEGIN
    SELECT RAISE(ABORT, 'aq_events is append-only: DELETE refused');
END;
