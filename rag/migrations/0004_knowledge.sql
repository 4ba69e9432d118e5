-- Knowledge base: chunks per generation (blue/green), the generation pointer, and an
-- embedding cache keyed by content hash + encoder so rebuilds reuse vectors.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE kb_generations (
    id              text PRIMARY KEY,                 -- e.g. g20261101T183500-1a2b
    status          text NOT NULL CHECK (status IN ('building', 'ready', 'active', 'previous', 'retired', 'failed')),
    purpose         text NOT NULL DEFAULT 'serve' CHECK (purpose IN ('serve', 'eval')),
    encoder         text NOT NULL,
    lexical         text NOT NULL,                    -- lexical backend name: tantivy | elasticsearch
    source          text,
    docs            integer NOT NULL DEFAULT 0,
    chunks          integer NOT NULL DEFAULT 0,
    stats           jsonb NOT NULL DEFAULT '{}'::jsonb,
    error           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    activated_at    timestamptz
);

-- The one pointer: which generation serves, and which one a rollback returns to.
CREATE TABLE kb_pointer (
    name            text PRIMARY KEY DEFAULT 'default' CHECK (name = 'default'),
    active          text REFERENCES kb_generations (id),
    previous        text REFERENCES kb_generations (id),
    switched_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO kb_pointer (name) VALUES ('default');

-- One partition per generation (each with its own HNSW index, built after the bulk load);
-- dropping a generation is dropping its partition.
CREATE TABLE kb_chunks (
    generation      text NOT NULL,
    chunk_id        text NOT NULL,                    -- shared with the lexical index
    doc_id          text NOT NULL,
    ord             integer NOT NULL,                 -- position of the chunk in its document
    title           text NOT NULL DEFAULT '',
    section         text NOT NULL DEFAULT '',
    lang            text NOT NULL DEFAULT '',
    category        text NOT NULL DEFAULT '',
    source          text NOT NULL DEFAULT '',
    updated_at      text,
    content_hash    text NOT NULL,
    text            text NOT NULL,
    embedding       vector(384) NOT NULL,
    PRIMARY KEY (generation, chunk_id)
) PARTITION BY LIST (generation);

CREATE TABLE kb_embeddings (
    encoder         text NOT NULL,
    content_hash    text NOT NULL,
    embedding       vector(384) NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (encoder, content_hash)
);
