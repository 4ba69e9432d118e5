-- Core gateway schema: conversations, their messages and one turn per inbound message.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE conversations (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    channel         text NOT NULL,
    external_id     text NOT NULL,              -- the channel's conversation id (or the client's)
    customer_id     text NOT NULL,
    state           text NOT NULL DEFAULT 'idle',
    session_no      integer NOT NULL DEFAULT 1,  -- a message after 'closed' starts the next session
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (channel, external_id)
);
CREATE INDEX conversations_customer_idx ON conversations (customer_id);

CREATE TABLE messages (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id uuid NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    channel         text NOT NULL,
    external_id     text NOT NULL,              -- the channel's message id: retries carry the same one
    direction       text NOT NULL CHECK (direction IN ('in', 'out')),
    sender          text NOT NULL CHECK (sender IN ('customer', 'bot', 'agent', 'system')),
    text            text NOT NULL,
    sent_at         timestamptz,
    received_at     timestamptz NOT NULL DEFAULT now(),
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    UNIQUE (channel, external_id)
);
CREATE INDEX messages_conversation_idx ON messages (conversation_id, id);

CREATE TABLE turns (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    conversation_id uuid NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    message_id      bigint NOT NULL UNIQUE REFERENCES messages(id) ON DELETE CASCADE,
    session_no      integer NOT NULL DEFAULT 1,
    state           text NOT NULL,
    decision        jsonb NOT NULL,
    response        jsonb NOT NULL,             -- exactly what the webhook answered: a retry gets it again
    trace           jsonb NOT NULL DEFAULT '{}'::jsonb,  -- stages, timings, scores (PII redacted) for replay
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX turns_conversation_idx ON turns (conversation_id, created_at);
