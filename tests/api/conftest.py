"""Fixtures of the HTTP API tests: ``server`` (see http_server) and ``api_server`` (see
server_fixture), each a real ``agentqueue api`` process per database kind."""

from __future__ import annotations

from http_server import server
from server_fixture import api_server

__all__ = ["api_server", "server"]
