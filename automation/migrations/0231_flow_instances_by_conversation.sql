-- A conversation's flows (its latest, how many it has had: read by every turn of a conversation with flows, and
-- to derive a new flow's id): without this index each of those reads scanned every conversation's flows.
CREATE INDEX flow_instances_conversation ON flow_instances (conversation_id, created_at DESC);
