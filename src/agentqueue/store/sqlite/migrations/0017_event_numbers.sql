-- PostgreSQL numbers events as they are written from this version on (R24). SQLite keeps
-- numbering them in the anchoring step: it has one writer at a time, and the numbering UPDATE
-- there costs less than a numbered insert would. Nothing to change.
SELECT 1;
