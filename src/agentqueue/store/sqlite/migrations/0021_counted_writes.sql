-- The hot writes count their own metrics (PostgreSQL's 0021). Nothing changes here: SQLite's
-- counts are written by its row triggers, in the transaction of each change.
SELECT 1;
