-- API tokens (R20): only a hash of each secret is kept, found by the secret's lookup prefix.
-- tenant NULL: every tenant (admin).

CREATE TABLE aq_tokens (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    prefix      text NOT NULL UNIQUE,
    secret_hash text NOT NULL,
    role        text NOT NULL
                CHECK (role IN ('submitter', 'approver', 'operator', 'admin', 'worker')),
    tenant      text,
    created_at  timestamptz NOT NULL,
    created_by  text NOT NULL,
    expires_at  timestamptz,
    revoked_at  timestamptz
);
