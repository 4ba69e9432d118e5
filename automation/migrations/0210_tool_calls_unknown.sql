-- A write whose server cannot recognise a repeat (no idempotency argument) and whose answer was lost after it
-- was sent has the status 'unknown': the gateway never sends it again, and reads the audit (and the tool's
-- declared read-back) before any repeat of its key. Earlier writes of a conversation are found by tool.
ALTER TABLE tool_calls DROP CONSTRAINT IF EXISTS tool_calls_status_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_status_check
    CHECK (status IN ('ok', 'error', 'timeout', 'invalid_input', 'invalid_output', 'breaker_open', 'denied',
                      'rate_limited', 'unknown'));
CREATE INDEX tool_calls_conversation_tool_idx ON tool_calls (conversation_id, tool, created_at)
    WHERE status = 'ok' AND attempts > 0;
-- The same change asked again in a conversation is recognised by a digest of the tool and its arguments (the
-- stored input is masked, so two different addresses would look alike).
ALTER TABLE tool_calls ADD COLUMN args_digest text;
