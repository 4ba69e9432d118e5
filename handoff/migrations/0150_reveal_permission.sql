-- Who may reveal one masked personal value in the agent view (for a reason, recorded): supervisors and
-- admins always; an agent only when granted.
ALTER TABLE handoff_agents ADD COLUMN IF NOT EXISTS can_reveal boolean NOT NULL DEFAULT false;
