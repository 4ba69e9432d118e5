"""Operations: structured logging and redaction, per-turn traces, Prometheus metrics, the report."""
