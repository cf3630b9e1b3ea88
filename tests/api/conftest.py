"""Fixtures of the HTTP API tests: ``server``, a real ``agentqueue api`` process per database
kind (see http_server)."""

from __future__ import annotations

from http_server import server

__all__ = ["server"]
