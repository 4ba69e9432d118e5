-- Fixed-window message counters for the per-integration-key and overall quotas (router/turn/admission.py).
-- A row per scope and window; rows of past windows are deleted a few at a time by the counting statement.
CREATE TABLE admission_counters (
    scope           text NOT NULL,             -- 'key:<integration key id>' | 'total'
    window_start    timestamptz NOT NULL,
    hits            integer NOT NULL,
    max_hits        integer NOT NULL,          -- the limit in force when last counted
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (scope, window_start)
);
CREATE INDEX admission_counters_expiry_idx ON admission_counters (expires_at);
