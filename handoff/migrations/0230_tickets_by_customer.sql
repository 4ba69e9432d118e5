-- A customer's recent tickets (the workflows' session memory reads them when a flow starts: earlier outcomes):
-- without this index every flow start read the whole tickets table.
CREATE INDEX tickets_customer_idx ON tickets (channel, customer_id, created_at DESC);
