-- The table of applied migrations (SQLite).

-- name: create_version_table
-- Create the table of applied migrations if it is missing.
CREATE TABLE IF NOT EXISTS aq_schema_version (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)

-- name: applied_versions
-- The migrations applied.
SELECT version FROM aq_schema_version

-- name: record_version
-- Record a migration as applied.
INSERT INTO aq_schema_version (version, name) VALUES (:version, :name)
