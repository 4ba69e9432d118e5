-- Conversation state machine (history of every transition), per-conversation escalation
-- counters, and per-customer flags the harness checks before any model runs.

-- Every state change, in order: who moved the conversation, from where to where, and why.
CREATE TABLE conversation_transitions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id uuid NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    session_no      integer NOT NULL,
    from_state      text NOT NULL,
    to_state        text NOT NULL,
    reason          text NOT NULL,
    actor           text NOT NULL DEFAULT 'router',   -- router | handoff | system
    message_id      bigint REFERENCES messages(id) ON DELETE SET NULL,
    ticket_id       text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversation_transitions_conv_idx ON conversation_transitions (conversation_id, id);

-- What the escalation policy remembers between turns of one session (reset on a new session,
-- on confirmed resolution and when a human hands the conversation back).
CREATE TABLE conversation_counters (
    conversation_id       uuid PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    session_no            integer NOT NULL DEFAULT 1,
    dissatisfied_streak   integer NOT NULL DEFAULT 0,
    low_confidence_streak integer NOT NULL DEFAULT 0,
    repeat_count          integer NOT NULL DEFAULT 0,   -- consecutive asks of the same unresolved question
    last_question         text,                          -- the last question (compared as text and by embedding)
    state_entries         jsonb NOT NULL DEFAULT '{}'::jsonb,   -- {state: times entered} for the loop guard
    feedback              text,                          -- positive | negative (last feedback of the session)
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- Flags about a customer on a channel: do-not-contact (STOP / 退订) and sensitive handling.
CREATE TABLE customer_flags (
    channel         text NOT NULL,
    customer_id     text NOT NULL,
    do_not_contact  boolean NOT NULL DEFAULT false,
    dnc_since       timestamptz,
    sensitive       boolean NOT NULL DEFAULT false,
    note            text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, customer_id)
);

-- The rate quota counts a customer's routed inbound messages in a sliding window.
CREATE INDEX messages_inbound_received_idx ON messages (conversation_id, received_at) WHERE direction = 'in';
