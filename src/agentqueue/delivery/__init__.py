"""Deliveries from the outbox: each is stored in the transaction of the change that calls for
it, then sent and retried with backoff until it is delivered (alerts: R8)."""
