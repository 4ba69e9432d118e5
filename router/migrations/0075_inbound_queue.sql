-- Messages acknowledged to a channel before their turn committed (WeChat answers "success" when the
-- passive-reply budget runs out): held here first, so a turn that later fails is finished by the
-- inbound worker instead of being lost. One row per (channel, external message id).
CREATE TABLE inbound_queue (
    id              bigserial PRIMARY KEY,
    channel         text NOT NULL,
    external_id     text NOT NULL,
    message         jsonb NOT NULL,
    route           jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    UNIQUE (channel, external_id)
);

CREATE INDEX inbound_queue_due ON inbound_queue (next_attempt_at) WHERE status = 'pending';
