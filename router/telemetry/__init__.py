"""What every layer reports as it runs: Prometheus metrics and structured logs with request ids and masked
personal data. Low in the layers so the turn, the outbox and the problem handlers can all use it."""
