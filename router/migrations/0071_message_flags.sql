-- Internal message state in its own columns, never in the client-supplied metadata; the exact response
-- text of a turn, so a retry is answered byte for byte; who posted a message (a retry must match).
ALTER TABLE messages ADD COLUMN throttled boolean NOT NULL DEFAULT false;
ALTER TABLE messages ADD COLUMN customer_id text;
ALTER TABLE messages ADD COLUMN integration_key_id uuid;
UPDATE messages SET throttled = true, metadata = metadata - 'throttled'
 WHERE metadata ->> 'throttled' = 'true';
ALTER TABLE turns ADD COLUMN response_text text;
