-- Operations: customer satisfaction per session, and the indexes the reports scan by time.

-- One CSAT rating per conversation session (1-5, optional comment). A retry of the same rating
-- is answered from this row; a different rating for a rated session is a conflict.
CREATE TABLE feedback (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id uuid NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    session_no      integer NOT NULL,
    turn_id         uuid REFERENCES turns(id) ON DELETE SET NULL,   -- the answer being rated, if given
    csat            smallint NOT NULL CHECK (csat BETWEEN 1 AND 5),
    comment         text,
    source          text NOT NULL DEFAULT 'api',
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (conversation_id, session_no)
);
CREATE INDEX feedback_created_idx ON feedback (created_at);

-- Reports select a time window of turns, transitions and tickets.
CREATE INDEX turns_created_idx ON turns (created_at);
CREATE INDEX conversation_transitions_created_idx ON conversation_transitions (created_at);
