"""One turn of a conversation: the pipeline's transaction, guards before any model, the decider,
escalation rules and the persisted conversation state."""
