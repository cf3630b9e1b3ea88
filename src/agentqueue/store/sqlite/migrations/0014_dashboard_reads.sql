-- What the dashboard reads on a large table: tasks that ended in a time range (its overview's
-- throughput and latency windows). Newest first needs no index here: seq is the rowid.
CREATE INDEX aq_tasks_finished ON aq_tasks (finished_at) WHERE finished_at IS NOT NULL;
