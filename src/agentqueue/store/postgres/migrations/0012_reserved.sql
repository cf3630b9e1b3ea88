-- Reserved: the number of a migration merged from another branch. This placeholder changes
-- nothing; it is deleted when that migration lands (two files numbered 0012 fail at once).
SELECT 1;
