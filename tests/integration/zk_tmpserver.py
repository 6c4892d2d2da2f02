"""A throw-away standalone ZooKeeper server for tests that stop and restart it (the shared
one from scripts/services must stay up for everyone else).

Started straight from Debian's jars like scripts/services does, on a free port, with its
data in a temporary directory that survives restarts (so sessions survive them too, as in
production) and is removed by ``close()``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Optional

import pytest

ZK_CP = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TmpZooKeeper:
    def __init__(self) -> None:
        if not shutil.which("java") or not os.path.exists(ZK_CP.split(":")[0]):
            pytest.skip("java or /usr/share/java/zookeeper.jar missing: `scripts/services up zk` installs them")
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="dblog-zk-")
        self.cfg = os.path.join(self.dir, "zoo.cfg")
        with open(self.cfg, "w") as f:
            f.write(
                f"tickTime=1000\ndataDir={self.dir}/data\nclientPort={self.port}\n"
                "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n"
                "maxSessionTimeout=60000\n"
            )
        self.proc: Optional[subprocess.Popen] = None
        self.log = open(os.path.join(self.dir, "zk.log"), "ab")

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        self.proc = subprocess.Popen(
            ["java", "-Xmx128m", "-cp", ZK_CP, "org.apache.zookeeper.server.ZooKeeperServerMain", self.cfg],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.dir}/zk.log")
            if self._ruok():
                return
            time.sleep(0.2)
        raise RuntimeError(f"ZooKeeper did not answer within {timeout} s; see {self.dir}/zk.log")

    def _ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def close(self) -> None:
        self.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
