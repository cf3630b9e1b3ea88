"""Fixtures of the API tests: a real ``agentqueue api`` server (see server_fixture)."""

from __future__ import annotations

from server_fixture import api_server

__all__ = ["api_server"]
