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


class TmpZooKeeperEnsemble:
    """Three ZooKeeper servers on loopback forming one ensemble (quorum 2), each a process of
    its own that a test kills and starts again by its number (1..3); data in a temporary
    directory removed by ``close()``."""

    SIZE = 3

    def __init__(self, tick_ms: int = 2000) -> None:
        if not shutil.which("java") or not os.path.exists(ZK_CP.split(":")[0]):
            pytest.skip("java or /usr/share/java/zookeeper.jar missing: `scripts/services up zk` installs them")
        self.dir = tempfile.mkdtemp(prefix="dblog-zkens-")
        nodes = range(1, self.SIZE + 1)
        self.ports = {n: (_free_port(), _free_port(), _free_port()) for n in nodes}  # client, quorum, election
        servers = "".join(f"server.{n}=127.0.0.1:{q}:{e}\n" for n, (_, q, e) in self.ports.items())
        self.procs: dict[int, subprocess.Popen] = {}
        for n in nodes:
            os.makedirs(f"{self.dir}/{n}/data")
            with open(f"{self.dir}/{n}/data/myid", "w") as f:
                f.write(f"{n}\n")
            with open(f"{self.dir}/{n}/zoo.cfg", "w") as f:
                f.write(
                    f"tickTime={tick_ms}\ninitLimit=10\nsyncLimit=5\ndataDir={self.dir}/{n}/data\n"
                    f"clientPort={self.ports[n][0]}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                    f"4lw.commands.whitelist=ruok,srvr\nmaxSessionTimeout=60000\n{servers}"
                )

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{c}" for c, _, _ in self.ports.values())

    def start(self, *nodes: int, timeout: float = 120) -> None:
        """Start the given nodes (all: none given) and wait until every running one serves
        in the ensemble (as its leader or a follower)."""
        for n in nodes or tuple(self.ports):
            with open(f"{self.dir}/{n}/zk.log", "ab") as log:
                self.procs[n] = subprocess.Popen(
                    ["java", "-Xmx128m", "-cp", ZK_CP, "org.apache.zookeeper.server.quorum.QuorumPeerMain"]
                    + [f"{self.dir}/{n}/zoo.cfg"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
        end = time.time() + timeout
        while time.time() < end:
            for n, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"ZooKeeper node {n} exited with {proc.returncode}; see {self.dir}/{n}/zk.log")
            if all(self.mode(n) in ("leader", "follower") for n in self.procs):
                return
            time.sleep(0.3)
        raise RuntimeError(f"the ensemble did not form within {timeout} s; see {self.dir}/*/zk.log")

    def mode(self, n: int) -> Optional[str]:
        """'leader', 'follower', or None (down, or not serving: no quorum)."""
        try:
            with socket.create_connection(("127.0.0.1", self.ports[n][0]), timeout=2) as s:
                s.sendall(b"srvr")
                text = b""
                while chunk := s.recv(4096):
                    text += chunk
        except OSError:
            return None
        for line in text.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def leader(self) -> int:
        (n,) = [n for n in self.procs if self.mode(n) == "leader"]
        return n

    def kill(self, n: int) -> None:
        proc = self.procs.pop(n, None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)

    def close(self) -> None:
        for n in list(self.procs):
            self.kill(n)
        shutil.rmtree(self.dir, ignore_errors=True)
