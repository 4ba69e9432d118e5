-- Replay protection for signatures that do not cover the body (WeChat plaintext mode): a (nonce,
-- timestamp, signature) seen once may come back only with the same body (the platform's own retry).
CREATE TABLE ingress_nonces (
    channel     text NOT NULL,
    nonce       text NOT NULL,
    body_sha256 text NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (channel, nonce)
);
CREATE INDEX ingress_nonces_expiry_idx ON ingress_nonces (expires_at);
