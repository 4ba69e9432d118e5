-- Transactional outbox: replies and agent messages are written here in the same transaction
-- as the turn (or the agent action); a dispatcher delivers them with retries.
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id uuid REFERENCES conversations(id) ON DELETE CASCADE,
    message_id      bigint REFERENCES messages(id) ON DELETE SET NULL,
    channel         text NOT NULL,
    kind            text NOT NULL DEFAULT 'reply',   -- reply | agent_message | ack | status (e.g. chatwoot open)
    payload         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at) WHERE status = 'pending';
