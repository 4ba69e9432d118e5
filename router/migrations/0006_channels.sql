-- Omnichannel ingress and outbound delivery.

-- Who is who: a channel's user id (WhatsApp wa_id, Telegram user id, WeChat openid, phone number,
-- Chatwoot contact) mapped to the gateway's customer id. Several identities may map to one customer.
CREATE TABLE channel_identities (
    channel         text NOT NULL,
    channel_user_id text NOT NULL,
    customer_id     text NOT NULL,
    profile         jsonb NOT NULL DEFAULT '{}'::jsonb,   -- display name etc. as the channel reports it
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, channel_user_id)
);
CREATE INDEX channel_identities_customer_idx ON channel_identities (customer_id);

-- How to reach a conversation on its channel (chat id, phone numbers, Chatwoot account/conversation):
-- written by the webhook, read by the dispatcher for replies and agent messages.
CREATE TABLE channel_routes (
    channel                  text NOT NULL,
    conversation_external_id text NOT NULL,
    channel_user_id          text NOT NULL,
    address                  jsonb NOT NULL,
    updated_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, conversation_external_id)
);

-- What the dispatcher needs on the outbox: an idempotency key for rows written outside a turn's
-- transaction, a claim lease (a crashed sender's rows go back to the queue), the channel's id for
-- the delivered message, and when a row was dead-lettered.
ALTER TABLE outbox
    ADD COLUMN dedupe_key          text UNIQUE,
    ADD COLUMN lease_until         timestamptz,
    ADD COLUMN provider_message_id text,
    ADD COLUMN dead_at             timestamptz;
CREATE INDEX outbox_sending_idx ON outbox (lease_until) WHERE status = 'sending';
-- per-conversation ordering: a row waits while an earlier one of its conversation is undelivered
-- a conversation's rows (passive-reply lookups, cascading deletes of conversations)
CREATE INDEX outbox_conversation_idx ON outbox (conversation_id, id);
CREATE INDEX outbox_open_by_conversation_idx ON outbox (conversation_id, id) WHERE status IN ('pending', 'sending');

-- Every delivery attempt with its outcome: the delivery status history of a message.
CREATE TABLE outbox_attempts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id   bigint NOT NULL REFERENCES outbox(id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead', 'skipped')),
    http_status integer,
    error       text,
    duration_ms real,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_attempts_outbox_idx ON outbox_attempts (outbox_id, id);
