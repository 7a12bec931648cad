"""A real PostgreSQL server for the tests: Debian's ``postgresql`` package, started in a
temporary folder on a Unix socket only (no TCP port, so parallel runs cannot collide) and
stopped afterwards. Never a mock: optuna's RDB storage talks to it through psycopg2.

PostgreSQL refuses to run as root, so as root (CI) the server runs as the ``postgres`` user
the package creates; the client side (the test and the ``devicefit`` workers) connects as the
database superuser ``devicefit`` over the socket with trust authentication.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = ("PostgreSQL's server is not installed: run 'make test' (it installs Debian's "
                "postgresql package) or 'apt-get install -y postgresql'")
USER = "devicefit"
PORT = 5432  # only names the socket file: the server listens on no TCP address


@dataclass(frozen=True)
class Server:
    socket_dir: Path
    database: str = "postgres"

    @property
    def url(self) -> str:
        """An SQLAlchemy URL for psycopg2 over the Unix socket."""
        return f"postgresql+psycopg2://{USER}@/{self.database}?host={self.socket_dir}&port={PORT}"


def server_bin() -> Path | None:
    """The newest installed server's bin folder (Debian keeps it off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).resolve().parent if pg_ctl else None


def _as_owner(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@contextmanager
def postgres_server() -> Iterator[Server]:
    """Start a throw-away server; stop it and delete its files on exit."""
    bindir = server_bin()
    if bindir is None:
        raise RuntimeError(INSTALL_HINT)
    root = Path(tempfile.mkdtemp(prefix="devicefit-pg-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data, log = root / "data", root / "server.log"
    env = {**os.environ, "LC_ALL": "C"}
    try:
        subprocess.run(_as_owner([str(bindir / "initdb"), "-D", str(data), "-U", USER,
                                  "-A", "trust", "-E", "UTF8", "--no-sync"]),
                       check=True, capture_output=True, env=env)
        # fsync off: a test database need not survive a power cut, and it is much faster.
        options = (f"-k {root} -p {PORT} -c listen_addresses='' -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log),
                                  "-o", options, "-w", "-t", "60", "start"]),
                       check=True, capture_output=True, env=env)
        try:
            yield Server(root)
        finally:
            subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                                      "-w", "stop"]), capture_output=True, env=env)
    except subprocess.CalledProcessError as exc:
        tail = log.read_text()[-2000:] if log.is_file() else ""
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')}"
                           f"{tail}") from exc
    finally:
        shutil.rmtree(root, ignore_errors=True)
