-- API tokens (R20) (PostgreSQL).

-- name: insert_token
-- Add a token unless its name or prefix is taken.
INSERT INTO aq_tokens (id, name, prefix, secret_hash, role, tenant, created_at, created_by,
    expires_at)
VALUES (%(id)s, %(name)s, %(prefix)s, %(secret_hash)s, %(role)s, %(tenant)s, %(created_at)s,
    %(created_by)s, %(expires_at)s)
ON CONFLICT DO NOTHING
RETURNING id

-- name: token_by_prefix
-- The token a secret's lookup prefix names.
SELECT * FROM aq_tokens WHERE prefix = %(prefix)s

-- name: list_tokens
-- Every token, by name.
SELECT * FROM aq_tokens ORDER BY name

-- name: revoke_token
-- Revoke a token by name (no-op if it is already revoked).
UPDATE aq_tokens SET revoked_at = %(now)s WHERE name = %(name)s AND revoked_at IS NULL
RETURNING *
