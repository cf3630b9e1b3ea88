-- The scheduler (R4, R12, R13, R21): why a blocked task is held, the leader lease, paused task
-- types and the shared token buckets of named rate limits.

-- What holds a blocked task: 'dependencies' (R13) or 'approval' (a guardrail, R15). Only the
-- dependency step's own holds are ever released by it.
ALTER TABLE aq_tasks ADD COLUMN hold text;
CREATE INDEX aq_tasks_held ON aq_tasks (hold, seq) WHERE state = 'blocked';

-- Fair share reads the best pending tasks of each tenant.
CREATE INDEX aq_tasks_pending_tenant ON aq_tasks (tenant, priority, eligible_at, seq)
    WHERE state = 'pending';

-- One row per leadership: whoever holds an unexpired lease leads; a new term on every change.
CREATE TABLE aq_leader (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    term        bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- Task types paused during an incident: nothing of theirs is admitted or claimed.
CREATE TABLE aq_paused (
    task_type text PRIMARY KEY,
    paused_at timestamptz NOT NULL,
    paused_by text NOT NULL,
    reason    text NOT NULL DEFAULT ''
);

-- Token buckets of named rate limits, shared by every scheduler.
CREATE TABLE aq_rate_buckets (
    name       text PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at timestamptz NOT NULL
);
