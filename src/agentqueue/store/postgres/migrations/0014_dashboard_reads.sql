-- What the dashboard reads on a large table: tasks that ended in a time range (its overview's
-- throughput and latency windows), and every tenant's tasks newest first (its tasks page; the
-- listing index leads with the tenant).
CREATE INDEX aq_tasks_finished ON aq_tasks (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX aq_tasks_newest ON aq_tasks (seq);
