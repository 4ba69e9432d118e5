-- The tool gateway's audit: one row per tool call (all attempts of a call in one row), whatever its outcome.
-- Input, output and error are stored redacted. No foreign keys to router's tables: automation owns only this.
CREATE TABLE tool_calls (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    conversation_id  text,
    turn_id          text,
    purpose          text,                       -- the intent or workflow that asked for the call
    tool             text NOT NULL,
    risk             text NOT NULL CHECK (risk IN ('read', 'write', 'money')),
    caller_channel   text NOT NULL,
    caller_customer  text NOT NULL,
    input            jsonb NOT NULL DEFAULT '{}'::jsonb,
    output           jsonb,
    status           text NOT NULL CHECK (status IN ('ok', 'error', 'timeout', 'invalid_input', 'invalid_output',
                                                     'breaker_open', 'denied', 'rate_limited')),
    error            text,
    latency_ms       double precision NOT NULL,
    attempts         integer NOT NULL DEFAULT 1,
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_calls_conversation_idx ON tool_calls (conversation_id, created_at);
CREATE INDEX tool_calls_turn_idx ON tool_calls (turn_id);
CREATE INDEX tool_calls_tool_idx ON tool_calls (tool, created_at);
CREATE INDEX tool_calls_idempotency_idx ON tool_calls (idempotency_key) WHERE idempotency_key IS NOT NULL;
