-- Erasure requests (PIPL / GDPR) and the retention job may blank a ticket event's payload: the
-- audit trail keeps who did what and when, not the customer's words. Only a transaction that sets
-- switchboard.erasure = 'on' (SET LOCAL, see handoff/privacy.py) may do it, and only to the payload;
-- everything else stays append-only.
CREATE OR REPLACE FUNCTION handoff_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'ticket_events'
       AND coalesce(current_setting('switchboard.erasure', true), '') = 'on'
       AND NEW.id = OLD.id AND NEW.ticket_id = OLD.ticket_id AND NEW.actor = OLD.actor
       AND NEW.actor_agent_id IS NOT DISTINCT FROM OLD.actor_agent_id AND NEW.action = OLD.action
       AND NEW.idempotency_key IS NOT DISTINCT FROM OLD.idempotency_key AND NEW.at = OLD.at THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END;
$$;
