-- A workflow waiting for a human decision (amount over the auto tier) opens a ticket of kind 'approval'.
ALTER TABLE tickets DROP CONSTRAINT IF EXISTS tickets_kind_check;
ALTER TABLE tickets ADD CONSTRAINT tickets_kind_check CHECK (kind IN ('assist', 'handoff', 'approval'));
