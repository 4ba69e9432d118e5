-- Rebuilds and syncs refused by the shrink guard (an empty or much smaller source than the serving
-- knowledge base): kept so /metrics and `switchboard report` show that the nightly job did not run.
CREATE TABLE kb_refusals (
    id                  bigserial PRIMARY KEY,
    command             text NOT NULL CHECK (command IN ('rebuild', 'sync')),
    source              text NOT NULL,
    active_generation   text,
    active_docs         integer NOT NULL,
    new_docs            integer NOT NULL,
    new_chunks          integer NOT NULL,
    reason              text NOT NULL,
    refused_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX kb_refusals_at ON kb_refusals (refused_at);
