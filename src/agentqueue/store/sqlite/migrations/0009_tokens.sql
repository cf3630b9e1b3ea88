-- API tokens (R20): only a hash of each secret is kept, found by the secret's lookup prefix.
-- Times are integer microseconds since the Unix epoch (UTC); tenant NULL: every tenant (admin).

CREATE TABLE aq_tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    prefix      TEXT NOT NULL UNIQUE,
    secret_hash TEXT NOT NULL,
    role        TEXT NOT NULL
                CHECK (role IN ('submitter', 'approver', 'operator', 'admin', 'worker')),
    tenant      TEXT,
    created_at  INTEGER NOT NULL,
    created_by  TEXT NOT NULL,
    expires_at  INTEGER,
    revoked_at  INTEGER
) WITHOUT ROWID;
