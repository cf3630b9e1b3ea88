"""Fixtures of the HTTP API tests (see http_server): ``server`` and ``client_server``, each a
real ``agentqueue api`` process per database kind with its own settings, and ``driver``, a
queue on ``client_server``'s database that plays the worker."""

from __future__ import annotations

from http_server import client_server, driver, server

__all__ = ["client_server", "driver", "server"]
