-- A flow interrupted by another task of the same customer ("where is my other order?" while a refund waits for
-- its amount) is suspended, not cancelled: when the other task ends, the most recent suspended flow asks its
-- question again. Suspended flows are not active (the one-active-flow index does not cover them).
ALTER TABLE flow_instances DROP CONSTRAINT IF EXISTS flow_instances_status_check;
ALTER TABLE flow_instances ADD CONSTRAINT flow_instances_status_check
    CHECK (status IN ('waiting', 'running', 'waiting_approval', 'suspended', 'completed', 'cancelled', 'escalated'));
CREATE INDEX flow_instances_suspended ON flow_instances (conversation_id, updated_at) WHERE status = 'suspended';
