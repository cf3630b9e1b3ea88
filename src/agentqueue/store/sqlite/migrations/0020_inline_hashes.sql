-- The audit's hashes computed inline (PostgreSQL's 0020). Nothing changes here: SQLite's
-- hashes are computed by the functions the store registers on each connection.
SELECT 1;
