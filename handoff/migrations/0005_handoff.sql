-- Handoff: agents and their API tokens, tickets (L2 assist and L3 handoff) and their
-- append-only event log. Conversation ids are plain text: handoff receives them as data and
-- knows nothing of the conversation tables.

CREATE TABLE handoff_agents (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    display_name    text,
    role            text NOT NULL CHECK (role IN ('agent', 'supervisor', 'admin')),
    teams           text[] NOT NULL DEFAULT '{general}',
    skills          text[] NOT NULL DEFAULT '{}',
    approval_level  text NOT NULL DEFAULT 'auto' CHECK (approval_level IN ('auto', 'supervisor', 'manager', 'director')),
    active          boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    disabled_at     timestamptz
);

-- Only the sha256 of a token is stored; the plaintext is shown once when it is issued.
CREATE TABLE handoff_tokens (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent_id        uuid NOT NULL REFERENCES handoff_agents(id),
    token_hash      text NOT NULL UNIQUE,
    prefix          text NOT NULL,              -- the first characters, to recognise a token in lists
    label           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    revoked_at      timestamptz,
    last_used_at    timestamptz
);
CREATE INDEX handoff_tokens_agent_idx ON handoff_tokens (agent_id);

CREATE TABLE tickets (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    kind              text NOT NULL CHECK (kind IN ('assist', 'handoff')),
    status            text NOT NULL DEFAULT 'queued'
                      CHECK (status IN ('queued', 'claimed', 'resolved', 'returned_to_bot', 'cancelled')),
    conversation_id   text NOT NULL,
    channel           text NOT NULL,
    customer_id       text NOT NULL,
    reason            text NOT NULL,
    priority          text NOT NULL CHECK (priority IN ('urgent', 'high', 'normal', 'low')),
    priority_rank     smallint GENERATED ALWAYS AS (
                          CASE priority WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'normal' THEN 2 ELSE 3 END
                      ) STORED,
    team              text NOT NULL,
    skills            text[] NOT NULL DEFAULT '{}',
    context           jsonb NOT NULL DEFAULT '{}'::jsonb,   -- transcript, decisions, evidence, customer facts
    draft             jsonb,                                 -- L2: the bot's reply and/or proposed action
    draft_status      text CHECK (draft_status IN ('pending', 'approved', 'edited', 'rejected')),
    amount            numeric(14, 2),
    currency          text,
    approval_level    text CHECK (approval_level IN ('auto', 'supervisor', 'manager', 'director')),
    approved_by       uuid REFERENCES handoff_agents(id),
    approved_at       timestamptz,
    claimed_by        uuid REFERENCES handoff_agents(id),
    claimed_at        timestamptz,
    lease_expires_at  timestamptz,
    first_claimed_at  timestamptz,
    sla_due_at        timestamptz NOT NULL,                  -- deadline for a human to pick the ticket up
    sla_breaches      integer NOT NULL DEFAULT 0,
    sla_breached_at   timestamptz,
    requeues          integer NOT NULL DEFAULT 0,            -- releases, expired leases, transfers to a team
    outcome           text,
    resolved_by       uuid REFERENCES handoff_agents(id),    -- who closed it (resolve, approve, hand back, cancel)
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    closed_at         timestamptz,
    CHECK ((status = 'claimed') = (claimed_by IS NOT NULL)),
    CHECK (status <> 'claimed' OR lease_expires_at IS NOT NULL)
);
-- A queue churns: every claim leaves a dead row version. Vacuum and analyze it early so scans
-- stay short and the planner keeps walking the queue index in order.
ALTER TABLE tickets SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
                         autovacuum_vacuum_threshold = 200, autovacuum_analyze_threshold = 200);
-- One open ticket per conversation: a second escalation joins the first instead of duplicating it.
CREATE UNIQUE INDEX tickets_one_open_per_conversation ON tickets (conversation_id)
    WHERE status IN ('queued', 'claimed');
-- claim-next walks this index in queue order and filters teams/skills on the way: an index led
-- by team would force a sort of the whole queue whenever an agent works several teams.
CREATE INDEX tickets_queue_idx ON tickets (priority_rank, sla_due_at, created_at, id) WHERE status = 'queued';
CREATE INDEX tickets_lease_idx ON tickets (lease_expires_at) WHERE status = 'claimed';
CREATE INDEX tickets_claimed_by_idx ON tickets (claimed_by) WHERE status = 'claimed';
CREATE INDEX tickets_list_idx ON tickets (status, priority_rank, sla_due_at, created_at, id);
CREATE INDEX tickets_conversation_idx ON tickets (conversation_id, created_at);

-- Append-only audit trail: who did what to which ticket, and when.
CREATE TABLE ticket_events (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ticket_id         uuid NOT NULL REFERENCES tickets(id),
    actor             text NOT NULL,              -- agent:<name> | system:<job> | bot | customer | cli:<user>
    actor_agent_id    uuid REFERENCES handoff_agents(id),
    action            text NOT NULL,
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb,
    idempotency_key   text,
    at                timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ticket_events_ticket_idx ON ticket_events (ticket_id, id);
CREATE INDEX ticket_events_action_at_idx ON ticket_events (action, at);
CREATE UNIQUE INDEX ticket_events_idempotency_idx ON ticket_events (ticket_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Administration of agents and tokens, also append-only.
CREATE TABLE handoff_admin_events (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor             text NOT NULL,
    action            text NOT NULL,
    agent_id          uuid REFERENCES handoff_agents(id),
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb,
    at                timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION handoff_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER ticket_events_append_only BEFORE UPDATE OR DELETE ON ticket_events
    FOR EACH ROW EXECUTE FUNCTION handoff_append_only();
CREATE TRIGGER handoff_admin_events_append_only BEFORE UPDATE OR DELETE ON handoff_admin_events
    FOR EACH ROW EXECUTE FUNCTION handoff_append_only();
