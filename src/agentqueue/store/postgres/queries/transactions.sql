-- Transactions (PostgreSQL): begun and ended by the dialect, not by the driver, so that the
-- BEGIN travels with the transaction's first statement (see PostgresSession).

-- name: begin
-- Start a transaction (sent ahead of its first statement, in one pipeline).
BEGIN

-- name: commit
-- Commit the transaction.
COMMIT

-- name: rollback
-- Roll the transaction back.
ROLLBACK
