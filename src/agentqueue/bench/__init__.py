"""Benchmarks of agentqueue, and of the queues a user would otherwise pick, on one machine.

``agentqueue bench`` (or the thin programs in ``benchmarks/``) runs them and writes a markdown
table, a JSON file with every figure and a chart of the drain comparison. The modules:

- ``drain``: preload N no-op tasks, one worker process drains them (agentqueue on PostgreSQL and
  SQLite, pgqueuer, procrastinate, Celery with Redis);
- ``enqueue``: submit one at a time, and in bulk;
- ``latency``: dispatch latency (created -> the handler began) at a steady submission rate;
- ``admission``: drain and latency again with a global cap on (the worker's claims admit every
  task), against the same figures with it off;
- ``backlog``: claim latency with 1k, 100k and 1M tasks queued;
- ``scaling``: 1, 2 and 4 worker processes on one PostgreSQL queue;
- ``cost``: CPU and peak RSS of an idle and of a busy worker;
- ``dashboard``: server-side render time of the dashboard's overview and tasks page with
  1,000,000 tasks in the table on PostgreSQL;
- ``routed``: drain and latency with six command agents configured (every task through the
  routing planner) and with a global cap, against the same with neither;
- ``agent``: end-to-end command agents (``true``): tasks per second, and the overhead of an
  attempt over a bare fork+exec of the same command;
- ``floor``: the claim and complete statements alone (the physical limit), and the drain as a
  fraction of it;
- ``api``: the HTTP API (a server process, a load process) against the Python API: single
  submits from 16 connections, bulk submits, and GET latency at a steady rate;
- ``metrics``: a ``/metrics`` scrape (read afresh and rendered) with 1M tasks in the table.

This package is imported only by the ``bench`` command; nothing else in agentqueue depends on it.
"""

from __future__ import annotations

BENCHMARKS: tuple[str, ...] = (
    "drain",
    "enqueue",
    "latency",
    "admission",
    "backlog",
    "scaling",
    "cost",
    "api",
    "metrics",
    "dashboard",
    "routed",
    "agent",
    "floor",
)
"""Every benchmark, in the order of the report."""

__all__ = ["BENCHMARKS"]
