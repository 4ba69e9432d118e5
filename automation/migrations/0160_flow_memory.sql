-- Session memory of the workflows: the customer's profile, recent orders and earlier outcomes, loaded once per
-- conversation (session) from the shop's read tools and this package's flow_instances, offered to flows as
-- `memory` and shown in a ticket's context package.
CREATE TABLE flow_memory (
    conversation_id   text PRIMARY KEY,
    customer_channel  text NOT NULL,
    customer_id       text NOT NULL,
    data              jsonb NOT NULL,
    loaded_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX flow_memory_customer ON flow_memory (customer_channel, customer_id);

-- A customer's earlier flows (memory.outcomes), newest first.
CREATE INDEX flow_instances_customer
    ON flow_instances ((caller->>'channel'), (caller->>'customer_id'), created_at DESC);
