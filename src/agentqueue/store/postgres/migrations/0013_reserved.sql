-- Placeholder: this number is reserved for a migration being written elsewhere at the same
-- time (the numbers must run 1..n). Replace it with that migration when they meet.
SELECT 1;
