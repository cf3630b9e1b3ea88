-- GitHub intake (R18): each delivery is recorded once, in the transaction of everything it
-- caused, with the answer it got (a redelivery is answered the same and changes nothing); and
-- per issue or pull request, what ordering needs: the open/closed state and the head commit
-- last seen, each with the issue's or pull request's updated_at when it was seen.
-- Times are integer microseconds since the Unix epoch (UTC).

CREATE TABLE aq_intake_deliveries (
    delivery_id TEXT PRIMARY KEY,
    event       TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    answer      TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE aq_intake_sources (
    tenant    TEXT NOT NULL,
    source    TEXT NOT NULL,
    source_id TEXT NOT NULL,
    state     TEXT CHECK (state IN ('open', 'closed')),
    state_at  INTEGER,
    head_sha  TEXT,
    head_at   INTEGER,
    PRIMARY KEY (tenant, source, source_id)
) WITHOUT ROWID;
