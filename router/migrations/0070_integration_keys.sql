-- Integration keys of the direct API (POST /v1/messages, feedback): only the SHA-256 of the key is stored.
-- A key is 256 random bits, so a fast hash is enough: nobody can guess a preimage, and a slow hash
-- (bcrypt, argon2) only protects low-entropy secrets such as passwords.
CREATE TABLE integration_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL UNIQUE,
    key_hash    text NOT NULL UNIQUE,
    prefix      text NOT NULL,                  -- the first characters, to recognise a key in a list
    channels    text[] NOT NULL CHECK (cardinality(channels) > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- The gateway's own secret for per-conversation feedback tokens (HMAC), made once per database so every
-- pod agrees; gen_random_uuid draws from the server's strong random source (2 x 122 bits).
CREATE TABLE router_secrets (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO router_secrets (name, value)
VALUES ('feedback_token', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
