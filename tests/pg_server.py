"""A throwaway PostgreSQL cluster for the history tests, started once per test session.

:func:`server` runs the distribution's server binaries (``PERFGATE_PG_BIN``, else the
newest ``/usr/lib/postgresql/<N>/bin``, else ``pg_ctl`` on the PATH) on a new cluster in a
temporary folder: ``initdb`` (as the ``postgres`` user when the tests run as root, which
``initdb`` refuses), then ``pg_ctl start`` listening only on a unix socket in that folder
(no TCP port, nothing another process on the machine can reach by accident), with
``fsync`` off (the cluster is thrown away). :func:`stop` stops it and removes the folder.

Two roles: ``perfgate`` (the superuser, trusted on the socket: the tests' own) and
``recorder`` (its password checked with SCRAM), for the tests of a URL whose password
comes from the environment.

**Fail, not skip.** A server that cannot start fails every test that needs it, with the
server's log. Only when no server binaries are found at all, and ``CI`` is not set, are
those tests skipped (a developer's machine without PostgreSQL still runs the rest); in
CI a missing server is a failure, so the PostgreSQL half of the history tests can never
silently drop out of the suite.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

PASSWORD = "s3cret-Pw-7d1e"
"""The ``recorder`` role's password: no message perfgate writes may hold it."""
PREFIX = "perfgate-pg-"
STALE_AFTER_S = 3600.0
"""A cluster folder with no live server is left alone this long (another session may be creating it)."""
_STARTED: Server | None = None
_FAILED: str | None = None


@dataclass
class Server:
    folder: Path
    bin: Path
    as_postgres: bool

    @property
    def socket(self) -> str:
        return str(self.folder)

    def url(self, database: str, user: str = "perfgate") -> str:
        return f"postgresql://{user}@/{database}?host={self.socket}"

    def sql(self, *statements: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """Run ``statements`` as the superuser (autocommit); the last one's rows, if any."""
        import psycopg

        rows: list[tuple[object, ...]] = []
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            for statement in statements:
                cur = conn.execute(statement)
                rows = cur.fetchall() if cur.description else []
        return rows

    def new_database(self) -> str:
        """A fresh, empty database; its name."""
        name = f"h_{uuid.uuid4().hex[:12]}"
        self.sql(f"CREATE DATABASE {name} TEMPLATE template0")
        self.sql("GRANT ALL ON SCHEMA public TO recorder", database=name)
        return name


def _binaries() -> Path | None:
    given = os.environ.get("PERFGATE_PG_BIN")
    if given:
        return Path(given)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4])
                   if p.split("/")[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _run(server: Server, *argv: str) -> None:
    command = [str(server.bin / argv[0]), *argv[1:]]
    if server.as_postgres:
        command = ["runuser", "-u", "postgres", "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        log = server.folder / "server.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}\n{tail}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (the postgres user's server, seen by a non-root run)
        return True
    return True


def sweep_stale(parent: Path, min_age_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove the clusters earlier sessions left in ``parent`` (a killed run never reaches
    :func:`stop`: about 340 MB each); the folders removed.

    A folder is stale when its server's ``postmaster.pid`` names no live process, or it has
    none, and it is older than ``min_age_s``: a cluster another session is creating (no
    pid file yet) or running is never touched."""
    removed = []
    now = time.time()
    for folder in sorted(parent.glob(PREFIX + "*")):
        try:
            if not folder.is_dir() or folder.is_symlink() or now - folder.stat().st_mtime < min_age_s:
                continue
            pid_file = folder / "data" / "postmaster.pid"
            if pid_file.exists():
                first = pid_file.read_text(errors="replace").split("\n", 1)[0].strip()
                if not first.isdigit() or _alive(int(first)):
                    continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _start() -> Server:
    binaries = _binaries()
    if binaries is None or not (binaries / "initdb").exists():
        raise LookupError("no PostgreSQL server binaries (initdb, pg_ctl) found: install the postgresql package, "
                          "or set PERFGATE_PG_BIN to their folder")
    as_postgres = os.geteuid() == 0
    if as_postgres:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root, and initdb refuses root: no 'postgres' user to run it as "
                               "(the postgresql package creates one)") from None
    # in /tmp itself: a unix socket's path is at most 107 bytes, and the postgres user must
    # reach the folder (a TMPDIR under root's home it could not)
    parent = Path("/tmp") if os.path.isdir("/tmp") else Path(tempfile.gettempdir())
    sweep_stale(parent)
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    server = Server(folder, binaries, as_postgres)
    if as_postgres:
        shutil.chown(folder, "postgres", "postgres")
    try:
        _initdb_and_start(server)
    except BaseException:
        try:  # a server that started before the failure
            _run(server, "pg_ctl", "-D", str(folder / "data"), "-m", "immediate", "-w", "stop")
        except (OSError, RuntimeError, subprocess.SubprocessError):
            pass
        shutil.rmtree(folder, ignore_errors=True)
        raise
    atexit.register(stop)  # also when the session ends without its fixtures' teardown
    return server


def _initdb_and_start(server: Server) -> None:
    folder = server.folder
    data = folder / "data"
    _run(server, "initdb", "-D", str(data), "-U", "perfgate", "--auth=trust", "--no-sync", "-E", "UTF8",
         "--no-instructions")
    hba = "local all recorder scram-sha-256\nlocal all all trust\n"
    (data / "pg_hba.conf").write_text(hba)
    options = (f"-k {folder} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
               "-c full_page_writes=off -c max_connections=40")
    _run(server, "pg_ctl", "-D", str(data), "-o", options, "-l", str(folder / "server.log"), "-w", "-t", "60",
         "start")
    server.sql(f"CREATE ROLE recorder LOGIN PASSWORD '{PASSWORD}'")


def server() -> Server:
    """The session's server, started on first use; a failure to start fails (or, outside
    CI and without any server binaries, skips) the test asking."""
    global _STARTED, _FAILED
    if _STARTED is None and _FAILED is None:
        try:
            _STARTED = _start()
        except LookupError as exc:
            _FAILED = f"skip:{exc}"
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _FAILED = f"fail:the PostgreSQL test server did not start: {exc}"
    if _FAILED is not None:
        kind, message = _FAILED.split(":", 1)
        if kind == "skip" and not os.environ.get("CI"):
            pytest.skip(message)
        pytest.fail(message, pytrace=False)
    assert _STARTED is not None
    return _STARTED


def stop() -> None:
    global _STARTED
    if _STARTED is None:
        return
    started, _STARTED = _STARTED, None
    try:
        _run(started, "pg_ctl", "-D", str(started.folder / "data"), "-m", "immediate", "-w", "stop")
    except (OSError, RuntimeError, subprocess.SubprocessError):
        pass
    shutil.rmtree(started.folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Path | str]:
    """Makes a new, empty store location of the engine under test."""
    if request.param == "sqlite":
        count = iter(range(1000))
        return lambda: tmp_path / f"h{next(count)}.sqlite"
    server: Server = request.getfixturevalue("postgres")
    return lambda: server.url(server.new_database())


def raw(location: Path | str, *statements: str) -> list[tuple[object, ...]]:
    """Run ``statements`` on the store behind perfgate's back (autocommit); the last one's rows."""
    rows: list[tuple[object, ...]] = []
    if isinstance(location, Path):
        conn = sqlite3.connect(location, isolation_level=None)
        try:
            for statement in statements:
                rows = conn.execute(statement).fetchall()
        finally:
            conn.close()
        return rows
    import psycopg

    with psycopg.connect(location, autocommit=True) as conn:
        for statement in statements:
            cur = conn.execute(statement)
            rows = cur.fetchall() if cur.description else []
    return rows


@pytest.fixture(scope="session")
def postgres() -> object:
    """The session's PostgreSQL server (:class:`Server`), stopped at the end of the session."""
    yield server()
    stop()
