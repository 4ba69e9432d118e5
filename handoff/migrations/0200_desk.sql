-- The agent's desk: tags and a waiting status on open tickets, and canned replies (macros) per language.
-- Internal notes are ticket events (action 'note'): never sent to the customer, part of the audit trail.
ALTER TABLE tickets ADD COLUMN tags text[] NOT NULL DEFAULT '{}';
-- pending: waiting for the customer's answer (cleared when they write); on_hold: waiting on someone else
ALTER TABLE tickets ADD COLUMN hold text CHECK (hold IN ('pending', 'on_hold'));
CREATE INDEX tickets_tags_idx ON tickets USING gin (tags);

CREATE TABLE handoff_macros (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,63}$'),
    language    text NOT NULL CHECK (language ~ '^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$'),
    title       text NOT NULL,
    body        text NOT NULL,
    team        text,                                   -- NULL: every team
    created_by  text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (name, language)
);

-- a few replies every desk starts with; supervisors change or add them (PUT /v1/handoff/macros/{name}/{lang})
INSERT INTO handoff_macros (name, language, title, body, created_by) VALUES
    ('greeting', 'en', 'Greeting', 'Hello {customer_name}, this is {agent_name}. I am looking into this for you now.', 'migration'),
    ('greeting', 'zh', '问候', '{customer_name}您好，我是{agent_name}，正在为您处理。', 'migration'),
    ('ask_order', 'en', 'Ask for the order number', 'Could you tell me the order number, {customer_name}? It starts with 1 and has six digits.', 'migration'),
    ('ask_order', 'zh', '询问订单号', '{customer_name}，请告诉我您的订单号（以 1 开头的六位数字）。', 'migration'),
    ('closing', 'en', 'Closing', 'Is there anything else I can help with, {customer_name}? Ticket {ticket}.', 'migration'),
    ('closing', 'zh', '结束语', '{customer_name}，还有什么可以帮您的吗？工单号 {ticket}。', 'migration');
