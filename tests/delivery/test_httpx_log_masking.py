"""httpx's own log lines name each request's URL: the deliverer masks the secrets in them, with
httpx imported only once a delivery is sent (a worker starts without it)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path


def test_urls_in_httpx_log_lines_are_masked() -> None:
    import httpx

    from agentqueue.delivery import outbox

    assert outbox  # importing it installs the filter on httpx's logger
    record = logging.LogRecord(
        "httpx", logging.INFO, __file__, 1, 'HTTP Request: %s %s "%s"',
        ("POST", httpx.URL("https://u:pw@hooks.example/in?token=s3cret"), "200 OK"), None,
    )  # fmt: skip
    for f in logging.getLogger("httpx").filters:
        assert isinstance(f, logging.Filter) and f.filter(record)
    line = record.getMessage()
    assert "s3cret" not in line and "pw" not in line, line
    assert "hooks.example/in" in line, line


def test_a_worker_imports_no_http_client_or_template_engine(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from agentqueue import AsyncQueue\n"
        f"q = AsyncQueue('sqlite:///{tmp_path / 'q.db'}')\n"
        "@q.handler('t')\n"
        "async def t(task, ctx): return None\n"
        "q.worker()\n"
        "print(sorted(m for m in ('httpx', 'jinja2') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
