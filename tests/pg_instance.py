"""A private PostgreSQL server for the tests that stop, crash and restart one at will.

Built with ``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin`` in a temporary folder, on
a free port picked at runtime, with its socket in that folder and fsync off (a server crash
keeps what the OS holds; synchronous_commit stays on, or a crash would lose commits the
clients were told of). When the tests run
as root the server runs as the ``postgres`` user (PostgreSQL refuses root). It is never the
shared server on port 5432: the tests stop and crash this one.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

PASSWORD_ROLE = "aq_pw"
"""A role that must give its password (scram-sha-256); every other role is trusted."""
TEST_PASSWORD = "s3cret-pw-never-shown"
"""The password of PASSWORD_ROLE (a test asserts it never shows in any output)."""


def find_bin() -> Path:
    """The folder holding initdb and pg_ctl, newest version first."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    raise FileNotFoundError(
        "initdb and pg_ctl were not found under /usr/lib/postgresql/*/bin: the fault tests start "
        "their own PostgreSQL server and need them (apt-get install postgresql)"
    )


def free_port() -> int:
    """A TCP port nothing listens on right now (never 5432)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 5432:
            return port


class PgInstance:
    """One private PostgreSQL server."""

    def __init__(self, password: str) -> None:
        self.bin = find_bin()
        self.port = free_port()
        self.password = password
        self.root = Path(tempfile.mkdtemp(prefix="aq-faults-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")

    # --- commands ---------------------------------------------------------------------------

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["su", "postgres", "-c", shlex.join(command)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{shlex.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}\n"
                f"server log:\n{self.log_tail()}"
            )
        return done

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def init(self) -> None:
        """initdb, the configuration, the password-protected role."""
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        conf = (
            f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self.root}'\n"
            "fsync = off\nfull_page_writes = off\n"
            "max_connections = 300\nshared_buffers = 32MB\n"
            "password_encryption = 'scram-sha-256'\n"
        )
        hba = (
            f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n"
            "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        )
        self._write(self.data / "postgresql.conf", conf, append=True)
        self._write(self.data / "pg_hba.conf", hba, append=False)
        self.start()
        self.sql(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{self.password}'")

    def _write(self, path: Path, text: str, *, append: bool) -> None:
        with path.open("a" if append else "w") as out:
            out.write(text)
        if self._as_postgres:
            shutil.chown(path, "postgres", "postgres")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``smart``, ``fast`` or ``immediate`` (a crash, recovered at start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again."""
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-m",
            mode,
            "-w",
            "-t",
            "60",
            "restart",
        )

    def running(self) -> bool:
        """Whether the server is up."""
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def url(self, dbname: str = "postgres", user: str = "postgres", password: str | None = None):
        """A URL on TCP to this server."""
        auth = f"{user}:{password}" if password is not None else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def sql(self, statement: str, dbname: str = "postgres") -> None:
        """Run one statement as the superuser."""
        self._run(
            "psql",
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            dbname,
            "-c",
            statement,
        )

    def create_database(self, name: str) -> str:
        """A new, empty database; its URL."""
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        """Stop (if running) and remove every file."""
        try:
            if self.data.exists() and self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
