-- GitHub intake (R18): each delivery is recorded once, in the transaction of everything it
-- caused, with the answer it got (a redelivery is answered the same and changes nothing); and
-- per issue or pull request, what ordering needs: the open/closed state and the head commit
-- last seen, each with the issue's or pull request's updated_at when it was seen.

CREATE TABLE aq_intake_deliveries (
    delivery_id text PRIMARY KEY,
    event       text NOT NULL,
    received_at timestamptz NOT NULL,
    answer      jsonb NOT NULL
);

CREATE TABLE aq_intake_sources (
    tenant    text NOT NULL,
    source    text NOT NULL,
    source_id text NOT NULL,
    state     text CHECK (state IN ('open', 'closed')),
    state_at  timestamptz,
    head_sha  text,
    head_at   timestamptz,
    PRIMARY KEY (tenant, source, source_id)
);
