"""A real PostgreSQL server for tests: Debian's binaries, a throwaway cluster in a temp dir.

``PostgresServer.start()`` runs ``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin``
(or ``PATH``) on a free loopback port, trust authentication for the user ``afm``; ``stop()``
ends it and removes the directory.  PostgreSQL refuses to run as root, so under root (CI) the
server runs as the ``postgres`` user Debian's package creates.  :func:`unavailable_reason`
says why no server can be started here (the test then skips with it).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from afm_struct.cli.cluster_ports import free_port

USER = "afm"
INSTALL_HINT = "apt-get install postgresql (make setup does it on Debian as root)"


def bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (the newest Debian version first)."""
    def version(path: str) -> tuple[int, ...]:
        return tuple(int(p) for p in Path(path).parent.name.split(".") if p.isdigit())

    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).resolve().parent / "pg_ctl").exists():
        return Path(initdb).resolve().parent
    return None


def _run_as() -> list[str] | None:
    """The prefix running a command as a user PostgreSQL accepts (None: there is none)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        return None
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return None
    return ["runuser", "-u", "postgres", "--"]


def unavailable_reason() -> str | None:
    """Why a server cannot be started here, or None."""
    if bin_dir() is None:
        return f"PostgreSQL's initdb/pg_ctl are not installed ({INSTALL_HINT})"
    if _run_as() is None:
        return "running as root without a 'postgres' user (or runuser) to run PostgreSQL as"
    return None


class PostgresServer:
    """One PostgreSQL server; ``url(dbname)`` connects to a database of it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="afm-pg-"))
        self.port = 0
        self._bin = bin_dir()
        self._as = _run_as()
        if self._bin is None or self._as is None:
            raise RuntimeError(unavailable_reason())
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")

    def _cmd(self, *args: str) -> list[str]:
        return [*(self._as or []), str(self._bin / args[0]), *args[1:]]

    def start(self) -> None:
        """initdb, then start on a free port (three tries: another process may take it)."""
        data = self.root / "data"
        subprocess.run(self._cmd("initdb", "-D", str(data), "-U", USER, "--auth=trust",
                                 "-E", "UTF8", "--no-sync", "--no-instructions"),
                       check=True, capture_output=True, cwd=self.root)
        for _ in range(3):
            self.port = free_port()
            options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                       "-c fsync=off -c max_connections=50")
            result = subprocess.run(self._cmd("pg_ctl", "-D", str(data), "-l", str(self.root / "log"),
                                              "-w", "-t", "60", "-o", options, "start"),
                                    capture_output=True, text=True, cwd=self.root)
            if result.returncode == 0:
                return
        log = (self.root / "log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"PostgreSQL did not start: {result.stderr.strip()}\n{log}")

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL for ``dbname`` on this server."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname: str) -> str:
        """A new empty database; its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        return self.url(dbname)

    def create_schema(self, name: str) -> str:
        """A URL whose tables go in a new empty schema ``name`` of the default database: an
        empty store for a test, much faster to make than a database."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url()}?options=-csearch_path%3D{name}"

    def stop(self) -> None:
        """Stop the server now and remove its directory."""
        if self.port:
            subprocess.run(self._cmd("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate",
                                     "-w", "stop"), capture_output=True, cwd=self.root)
        shutil.rmtree(self.root, ignore_errors=True)
