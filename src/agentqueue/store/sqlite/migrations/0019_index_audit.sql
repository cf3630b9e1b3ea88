-- The indexes of aq_tasks, audited against the named queries that read them (PostgreSQL's
-- 0019 lists which query reads which index). Nothing changes here: SQLite uses a partial index
-- only for a query whose WHERE clause contains the index's own condition, so a state index
-- made partial (as PostgreSQL's now is) would serve no listing by a state given as a
-- parameter; and newest first needs no index of its own here (seq is the rowid).
SELECT 1;
