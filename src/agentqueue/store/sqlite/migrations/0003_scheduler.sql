-- The scheduler (R4, R12, R13, R21): why a blocked task is held, the leader lease, paused task
-- types and the shared token buckets of named rate limits. Times are integer microseconds.

-- What holds a blocked task: 'dependencies' (R13) or 'approval' (a guardrail, R15). Only the
-- dependency step's own holds are ever released by it.
ALTER TABLE aq_tasks ADD COLUMN hold TEXT;
CREATE INDEX aq_tasks_held ON aq_tasks (hold, seq) WHERE state = 'blocked';

-- Fair share reads the best pending tasks of each tenant.
CREATE INDEX aq_tasks_pending_tenant ON aq_tasks (tenant, priority, eligible_at, seq)
    WHERE state = 'pending';

-- One row per leadership: whoever holds an unexpired lease leads; a new term on every change.
CREATE TABLE aq_leader (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    term        INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    renewed_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

-- Task types paused during an incident: nothing of theirs is admitted or claimed.
CREATE TABLE aq_paused (
    task_type TEXT PRIMARY KEY,
    paused_at INTEGER NOT NULL,
    paused_by TEXT NOT NULL,
    reason    TEXT NOT NULL DEFAULT ''
);

-- Token buckets of named rate limits, shared by every scheduler.
CREATE TABLE aq_rate_buckets (
    name       TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at INTEGER NOT NULL
);
