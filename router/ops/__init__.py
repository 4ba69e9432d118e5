"""Operations over what the gateway recorded: per-conversation traces, the report, retention and erasure,
conversation-set evaluation. Only the app and the CLI use it; the low-level telemetry is router.telemetry."""
