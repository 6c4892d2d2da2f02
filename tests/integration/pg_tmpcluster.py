"""A throw-away PostgreSQL cluster for tests that need server settings the shared test
server must not have (e.g. ``wal_level = replica``).

initdb runs as the ``postgres`` OS user (the server refuses to run as root) into a fresh
temporary directory, on a free port, listening on 127.0.0.1 only, with trust auth for the
``postgres`` superuser. ``stop()`` shuts it down immediately and removes the directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from typing import Optional

import pytest


def _bindir() -> Optional[str]:
    for candidate in ("/usr/lib/postgresql/15/bin",):
        if os.path.exists(os.path.join(candidate, "initdb")):
            return candidate
    found = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(found)) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TmpCluster:
    def __init__(self, settings: dict[str, str]):
        self.settings = settings
        self.bindir = _bindir()
        self.port = _free_port()
        self.dir: Optional[str] = None

    @property
    def dsn(self) -> dict:
        return dict(host="127.0.0.1", port=self.port, user="postgres", password="", dbname="postgres")

    def _as_postgres(self, *cmd: str) -> subprocess.CompletedProcess:
        argv = list(cmd) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def start(self) -> "TmpCluster":
        if self.bindir is None:
            pytest.skip("initdb not found: cannot start a throw-away PostgreSQL cluster")
        try:
            pg = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("no 'postgres' OS user to run a throw-away cluster as")
        if os.geteuid() not in (0, pg.pw_uid):
            pytest.skip("a throw-away cluster needs to run as root or as the postgres user")
        self.dir = tempfile.mkdtemp(prefix="dblog-pgtmp-")
        os.chown(self.dir, pg.pw_uid, pg.pw_gid)
        data = os.path.join(self.dir, "data")
        r = self._as_postgres(
            os.path.join(self.bindir, "initdb"),
            "-D",
            data,
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-locale",
            "--auth=trust",
        )
        if r.returncode != 0:
            self.stop()
            raise RuntimeError(f"initdb failed: {r.stderr[-2000:]}")
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.dir}'",
            "fsync": "off",
            **self.settings,
        }
        with open(os.path.join(data, "postgresql.conf"), "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        r = self._as_postgres(
            os.path.join(self.bindir, "pg_ctl"),
            "-D",
            data,
            "-l",
            os.path.join(self.dir, "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        if r.returncode != 0:
            log = ""
            try:
                with open(os.path.join(self.dir, "server.log")) as f:
                    log = f.read()[-2000:]
            except OSError:
                pass
            self.stop()
            raise RuntimeError(f"pg_ctl start failed: {r.stderr[-1000:]} {log}")
        return self

    def stop(self) -> None:
        if self.dir is None:
            return
        data = os.path.join(self.dir, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            self._as_postgres(os.path.join(self.bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> "TmpCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def has_setting(name: str) -> bool:
    """Whether this PostgreSQL build knows a server setting (some patched builds add
    ``output_plugin_libraries``)."""
    bindir = _bindir()
    if bindir is None:
        return False
    r = subprocess.run([os.path.join(bindir, "postgres"), "--describe-config"], capture_output=True, text=True)
    return any(line.split("\t", 1)[0] == name for line in r.stdout.splitlines())
