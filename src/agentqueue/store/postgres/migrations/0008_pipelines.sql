-- Pipelines per kind (R14): the kind that decides a task's path, the capabilities it asks of the
-- agent that runs it (labels), and the agent routing chose when it was admitted (claimed only by
-- that agent's executors).
ALTER TABLE aq_tasks ADD COLUMN kind text NOT NULL DEFAULT 'task';
ALTER TABLE aq_tasks ADD COLUMN labels jsonb NOT NULL DEFAULT '[]'::jsonb;
ALTER TABLE aq_tasks ADD COLUMN agent text;
-- A pending task no agent can take is looked at again from this time on (it does not hold the
-- admission window meanwhile).
ALTER TABLE aq_tasks ADD COLUMN route_after timestamptz;
