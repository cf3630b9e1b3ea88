"""The scheduler (R4, R6-R8, R12, R13, R18, R21): one leader at a time runs every step that moves
tasks on their own: taking back lapsed leases, retrying after backoff, dependencies, admission,
cron, retention and alerts. Workers run it by default, competing for the leadership, so workers
and a database make a complete deployment."""
