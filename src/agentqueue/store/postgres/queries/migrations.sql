-- The table of applied migrations, and the lock migrators take turns by (PostgreSQL).

-- name: create_version_table
-- Create the table of applied migrations if it is missing.
CREATE TABLE IF NOT EXISTS aq_schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: applied_versions
-- The migrations applied.
SELECT version FROM aq_schema_version

-- name: record_version
-- Record a migration as applied.
INSERT INTO aq_schema_version (version, name) VALUES (%(version)s, %(name)s)
ON CONFLICT DO NOTHING

-- name: migration_lock
-- Take the one turn to migrate, until commit.
SELECT pg_advisory_xact_lock(418387158644)  -- "agent" in hex
