-- An array's sessions are stored when they are first needed, not at submission: those from
-- `next_index` on (its tail: pending, alike but for their index) have no row yet, and reads
-- make them up from the array. A pass stores those it places (already scheduled); a cancel,
-- a rejection or an end stores those up to it first. Arrays stored before this keep all
-- their sessions (an empty tail).
ALTER TABLE arrays ADD COLUMN next_index INTEGER;
UPDATE arrays SET next_index = last_index + 1;
-- What every session of the tail shares beside what the array kept already: its device
-- constraints, and its wait reason and blocked passes as the last pass left them.
ALTER TABLE arrays ADD COLUMN constraints TEXT NOT NULL DEFAULT '[]';
ALTER TABLE arrays ADD COLUMN tail_wait_reason TEXT;
ALTER TABLE arrays ADD COLUMN tail_blocked_passes INTEGER NOT NULL DEFAULT 0;
-- The arrays of a group with a tail, as each pass reads them.
CREATE INDEX arrays_tails ON arrays (group_name) WHERE next_index <= last_index;
