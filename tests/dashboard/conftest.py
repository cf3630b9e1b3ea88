"""Fixtures of the dashboard's browser tests (see dash_site): ``site``, a real server and
worker per database kind; ``browser``, Debian's Chromium; ``admin_page``, a logged-in page."""

from __future__ import annotations

from dash_site import admin_page, browser, site

__all__ = ["admin_page", "browser", "site"]
