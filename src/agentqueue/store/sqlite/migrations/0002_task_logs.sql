-- Captured output of attempts (agent stdout/stderr, handler log lines), kept with the task.
CREATE TABLE aq_task_logs (
    id        INTEGER PRIMARY KEY,
    task_id   TEXT NOT NULL,
    tenant    TEXT NOT NULL,
    attempt   INTEGER NOT NULL,
    stream    TEXT NOT NULL,
    at        INTEGER NOT NULL,
    text      TEXT NOT NULL,
    truncated INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX aq_task_logs_task ON aq_task_logs (task_id, id);
