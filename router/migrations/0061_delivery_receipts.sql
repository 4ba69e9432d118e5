-- Outbound parts and delivery receipts.

-- A reply longer than its channel's limit goes out as ordered parts, one API call each. Every part
-- sent is recorded at once, so a retry after a failed later part resumes where it stopped instead
-- of sending the earlier parts again; each part keeps the channel's message id for its receipts.
-- (A reply sent in one call keeps its channel id in outbox.provider_message_id only.)
CREATE TABLE outbox_parts (
    outbox_id           bigint NOT NULL REFERENCES outbox(id) ON DELETE CASCADE,
    part                integer NOT NULL CHECK (part >= 0),
    parts               integer NOT NULL CHECK (parts > part),
    provider_message_id text,
    sent_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (outbox_id, part)
);
CREATE INDEX outbox_parts_provider_idx ON outbox_parts (provider_message_id) WHERE provider_message_id IS NOT NULL;
-- receipts find their message by the channel's id
CREATE INDEX outbox_provider_message_idx ON outbox (channel, provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- How far a status has come: a late 'delivered' never replaces 'read'; 'failed' replaces only 'sent'.
CREATE FUNCTION receipt_rank(status text) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE status WHEN 'sent' THEN 1 WHEN 'failed' THEN 2 WHEN 'delivered' THEN 3 WHEN 'read' THEN 4 ELSE 0 END
$$;

-- Status receipts the channel reports after delivery (WhatsApp: sent, delivered, read, failed).
-- One row per message id and status: a receipt the channel retries is stored once.
CREATE TABLE outbox_receipts (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id           bigint NOT NULL REFERENCES outbox(id) ON DELETE CASCADE,
    part                integer,                    -- which part, for a reply sent in parts
    provider_message_id text NOT NULL,
    status              text NOT NULL CHECK (status IN ('sent', 'delivered', 'read', 'failed')),
    status_at           timestamptz,                -- the channel's timestamp
    error_code          text,
    error_title         text,
    error_detail        text,
    received_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (outbox_id, provider_message_id, status)
);
CREATE INDEX outbox_receipts_outbox_idx ON outbox_receipts (outbox_id, id);

-- The furthest status of the message (any part), and the latest failure reported for it.
ALTER TABLE outbox
    ADD COLUMN receipt_status text,
    ADD COLUMN receipt_at     timestamptz,
    ADD COLUMN receipt_error  text;
