-- Mail threads (R25): a reply names the mail it answers. NULL: the task answers nothing.
ALTER TABLE aq_tasks ADD COLUMN in_reply_to TEXT;
CREATE INDEX aq_tasks_replies ON aq_tasks (tenant, in_reply_to) WHERE in_reply_to IS NOT NULL;
