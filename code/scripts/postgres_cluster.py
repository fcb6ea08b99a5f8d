"""A throwaway PostgreSQL cluster for the store's tests and benchmark: temp folder, Unix socket (and TCP if asked).

    cluster = postgres_cluster.start_or_skip()  # in setUpModule; SkipTest names what is missing
    url = cluster.new_database()                # a fresh, empty database per test
    cluster.stop(); cluster.start()             # a server restart under load
    cluster.destroy()                           # in tearDownModule: stop and remove the folder

The cluster is initialised with `initdb` into a temporary folder and started with
`pg_ctl`, listening on a Unix socket in that folder and on no TCP port unless `tcp_port`
asks for one on 127.0.0.1 (the sandbox tests connect both ways). As root the
binaries run as the `postgres` user (PostgreSQL refuses to run as root). For the tests
fsync is off (nothing there must survive a power cut); the benchmark asks for a durable
cluster, so its figures include the commit's flush. psycopg is optional: only the
functions that talk to the server need it.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from typing import Any
from urllib.parse import quote

GUARD_SECONDS = 60  # failure guard for pg_ctl; never an assertion
SUPERUSER = "notes_admin"

try:
    import psycopg
except ImportError:
    psycopg = None  # type: ignore[assignment]


def find_binaries() -> str | None:
    """The folder holding initdb and pg_ctl: PATH first, then Debian's /usr/lib/postgresql/*/bin."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return os.path.dirname(initdb)
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if all(os.access(os.path.join(folder, name), os.X_OK) for name in ("initdb", "pg_ctl")):
            return folder
    return None


def create_login(admin_url: str, role: str, password: str, database: str) -> None:
    """A login role with a password and a database it owns (for clients that connect over TCP)."""
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role)))


def missing() -> str | None:
    """One line naming what is missing to run the PostgreSQL tests, or None."""
    if psycopg is None:
        return "psycopg 3 is not installed (pip install 'psycopg[binary]>=3.2'; CI: .ci/setup-postgres.sh)"
    if find_binaries() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) not found (apt-get install postgresql)"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser, so PostgreSQL cannot be started as another user"
    return None


class Cluster:
    """One initdb'd cluster in a temp folder; Unix socket in that folder, no TCP."""

    def __init__(self, durable: bool = False, tcp_port: int = 0) -> None:
        self.durable = durable
        self.tcp_port = tcp_port  # also listen on 127.0.0.1 at this port (0: Unix socket only)
        self.bin = find_binaries()
        assert self.bin is not None
        self.root = tempfile.mkdtemp(prefix="pg-")
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "server.log")
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root: hand the folder to an unprivileged user.
            user = _unprivileged_user()
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", user.pw_name, "--"]
        os.chmod(self.root, 0o700)
        self._names = itertools.count()
        self._run(
            "initdb", "-D", self.data, "-A", "trust", "-U", SUPERUSER, "-E", "UTF8", "--no-sync", "--no-instructions"
        )

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [*self.prefix, os.path.join(self.bin, tool), *args],  # type: ignore[arg-type]
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=GUARD_SECONDS,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: " + done.stdout.decode(errors="replace")[-2000:])

    def start(self) -> None:
        """Start (or restart after stop) the server; returns once it accepts connections."""
        listen = f"-c listen_addresses=127.0.0.1 -p {self.tcp_port}" if self.tcp_port else "-c listen_addresses=''"
        options = f"-k {self.root} {listen} {'' if self.durable else '-F '}-c max_connections=60"
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", str(GUARD_SECONDS), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: 'fast' ends sessions cleanly, 'immediate' is a crash (recovery on start)."""
        self._run("pg_ctl", "-D", self.data, "-w", "-t", str(GUARD_SECONDS), "-m", mode, "stop")

    def url(self, database: str = "postgres") -> str:
        """A postgresql:// URL for `database` over the Unix socket."""
        port = f"&port={self.tcp_port}" if self.tcp_port else ""
        return f"postgresql:///{database}?host={quote(self.root, safe='')}&user={SUPERUSER}{port}"

    def tcp_url(self, database: str) -> str:
        """A postgresql:// URL for `database` over TCP to localhost, a name to resolve (a cluster with tcp_port)."""
        return f"postgresql://{SUPERUSER}@localhost:{self.tcp_port}/{database}"

    def admin(self) -> Any:
        """An autocommit superuser connection to the maintenance database."""
        return psycopg.connect(self.url(), autocommit=True)

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server (if running) and remove the folder."""
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass  # already stopped
        shutil.rmtree(self.root, ignore_errors=True)


def _unprivileged_user() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise LookupError("running as root and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL")


def start_or_skip(tcp_port: int = 0) -> Cluster:
    """A running throwaway cluster, or SkipTest with one line naming what is missing."""
    import unittest

    reason = missing()
    if reason is not None:
        raise unittest.SkipTest(reason)
    try:
        cluster = Cluster(tcp_port=tcp_port)
    except LookupError as exc:
        raise unittest.SkipTest(str(exc)) from None
    try:
        cluster.start()
    except BaseException:
        cluster.destroy()
        raise
    return cluster
