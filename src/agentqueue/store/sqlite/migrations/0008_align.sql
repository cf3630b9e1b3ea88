-- Nothing to change: PostgreSQL's 0003_event_hash has no SQLite counterpart (SQLite registers the
-- audit hash as a function on each connection), which left SQLite one number behind. From here on
-- a migration has the same number in both dialects (see store/migrate.py).
SELECT 1;
