"""Where work comes from besides direct submits: cron schedules (and, later, webhooks)."""
