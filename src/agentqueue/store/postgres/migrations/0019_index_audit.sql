-- The indexes of aq_tasks, audited against the named queries that read them (EXPLAIN on a
-- table of 100k tasks in every state, analyzed). Every index serves some query:
--   pkey            every read and guarded write by id
--   live_source     R2's uniqueness; find_live_by_source, lock_live_by_source
--   idempotency     R2's uniqueness; find_by_idempotency
--   queued          claim, queued_p0, metric_oldest_queued, work_hints, active_count
--   pending         admit, count_parked, work_hints
--   pending_tenant  pending_tenants, admission_candidates
--   leases          lock_lapsed, heartbeat, busy_workers, preemptible, work_hints, active_count
--   retrying, held, dead_letters, tool_deadlines   the scheduler steps of their state
--   listing         list_tasks of one tenant, newest first
--   newest          list_tasks of every tenant, newest first
--   finished        the dashboard overview (ended_counts, ended_sample)
--   replies         replies
--   state           list_tasks of some states, newest first
--
-- No update of a task is HOT (every transition changes state, which the partial indexes'
-- predicates read), so each write of a task adds an entry to every index whose predicate the
-- new row meets. The state index held every row: each submit, claim and completion added to
-- it. Now it holds only the states off the hot path. The three it leaves out have better paths
-- of their own: queued and executing tasks have their partial indexes (queued, leases), and
-- completed tasks, the bulk of a table, are found newest first by the newest and listing
-- indexes. active_count reads the queued and leases indexes instead.
DROP INDEX aq_tasks_state;
CREATE INDEX aq_tasks_state ON aq_tasks (state, seq)
    WHERE state NOT IN ('completed', 'queued', 'executing');
