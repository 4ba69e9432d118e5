-- Durable workflow instances: one row per running SOP, locked FOR UPDATE by the turn that advances it.
CREATE TABLE flow_instances (
    id               uuid PRIMARY KEY,
    conversation_id  text NOT NULL,
    workflow         text NOT NULL,
    version          integer NOT NULL,
    step             text,
    status           text NOT NULL CHECK (status IN ('waiting', 'running', 'waiting_approval',
                                                     'completed', 'cancelled', 'escalated')),
    outcome          text,
    lang             text NOT NULL DEFAULT 'en',
    caller           jsonb NOT NULL DEFAULT '{}'::jsonb,
    slots            jsonb NOT NULL DEFAULT '{}'::jsonb,
    bindings         jsonb NOT NULL DEFAULT '{}'::jsonb,
    attempts         jsonb NOT NULL DEFAULT '{}'::jsonb,
    loops            jsonb NOT NULL DEFAULT '{}'::jsonb,
    pending          jsonb NOT NULL DEFAULT '{}'::jsonb,
    generation       integer NOT NULL DEFAULT 0,
    approval_ticket  text,
    history          jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- At most one active flow per conversation: a second start fails instead of forking the task.
CREATE UNIQUE INDEX flow_instances_one_active
    ON flow_instances (conversation_id)
    WHERE status IN ('waiting', 'running', 'waiting_approval');

CREATE INDEX flow_instances_workflow ON flow_instances (workflow, status);
CREATE INDEX flow_instances_ticket ON flow_instances (approval_ticket) WHERE approval_ticket IS NOT NULL;
