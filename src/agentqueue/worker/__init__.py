"""Workers: the claim loop, heartbeats, cancellation and graceful stop."""

from .runner import Worker, WorkerOptions, default_worker_id

__all__ = ["Worker", "WorkerOptions", "default_worker_id"]
