-- Waiting on tools (R9): when the awaited tool call of a waiting_tool task times out. The calls
-- themselves (id, name, args, state, result) are the task's tool_calls.
ALTER TABLE aq_tasks ADD COLUMN tool_deadline_at timestamptz;
CREATE INDEX aq_tasks_tool_deadlines ON aq_tasks (tool_deadline_at) WHERE state = 'waiting_tool';
