-- Captured output of attempts (agent stdout/stderr, handler log lines), kept with the task.
CREATE TABLE aq_task_logs (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id   uuid NOT NULL,
    tenant    text NOT NULL,
    attempt   integer NOT NULL,
    stream    text NOT NULL,
    at        timestamptz NOT NULL,
    text      text NOT NULL,
    truncated boolean NOT NULL DEFAULT false
);
CREATE INDEX aq_task_logs_task ON aq_task_logs (task_id, id);
