-- Placeholder for migration 10 (taken by another branch); removed when the branches are merged.
SELECT 1;
