"""The ZooKeeper state store (kazoo): the same contract as the local store, shared by every
capture instance of a source and by the CLI, on any machine.

Znode layout under the chroot (default ``/dblog``; docs/state.md has the full picture).
Names taken from user input (source ids, table names, value keys) are percent-encoded,
because a znode name may not contain ``/`` and may not be ``.`` or ``..``::

    sources/<source>/checkpoint                   log position (Position.encode())
    sources/<source>/dumps/<dump_id>              DumpSpec JSON (written once)
    sources/<source>/dumps/<dump_id>/control      DumpControl JSON (users write it)
    sources/<source>/dumps/<dump_id>/status       {"status", "error", "updated_at"} (engine)
    sources/<source>/dumps/<dump_id>/progress/<table>   TableProgress JSON (engine)
    sources/<source>/leader/...                   leader lease (state/lease.py)
    dump_ids/<dump_id>                            the dump's source id (lookup by id)
    values/<key>                                  small named values (status reports)
    acl                                           with credentials: the tree carries their ACL

With credentials (``DigestAuth``) every znode here is readable and writable by them alone
(state/zookeeper_acl.py).

Spec, control, status and progress are separate znodes because they have separate writers
(core/dumps.py): a user's pause never overwrites the engine's progress and vice versa.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from typing import Any, Callable, Optional

from ..core.dumps import Dump, DumpControl, DumpSpec, DumpStatus, TableProgress
from ..core.errors import ConfigurationError, RequestError
from ..core.events import Position
from ..core.protocols import Fence
from .lease_common import lease_lost
from .local import no_capture_state
from .zookeeper_acl import KAZOO_LOG, DigestAuth, refused, secure_chroot

log = logging.getLogger(__name__)

DEFAULT_CHROOT = "/dblog"
DEFAULT_SESSION_TIMEOUT = 10.0  # seconds; bounds failover time (docs/state.md)
CONNECT_TIMEOUT = 10.0


def encode_name(name: str) -> str:
    """A znode name for any string: percent-encoded, so '/' cannot nest and '.' is safe."""
    quoted = urllib.parse.quote(name, safe="-_~@:,=+")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def decode_name(name: str) -> str:
    return urllib.parse.unquote(name)


URL_OPTIONS = ("session_timeout",)


def parse_zk_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``zk://host:port[,host:port...][/chroot][?session_timeout=S]`` -> hosts, chroot, options.
    Credentials are refused here: a URL ends up in argv, logs and Airflow's UI."""
    parsed = urllib.parse.urlsplit(url)
    if "@" in parsed.netloc:
        raise ConfigurationError(
            "the ZooKeeper state URL carries credentials (user@ or user:password@ before the hosts); "
            "a URL is shown in process lists, logs and Airflow's UI.",
            "remove them from the URL; set [state] auth_user and put the password into the environment "
            "variable named by auth_password_env (default DBLOG_STATE_PASSWORD) or the file named by "
            'auth_password_file (docs/state.md, "Authentication and ACLs").',
        )
    if parsed.scheme not in ("zk", "zookeeper") or not parsed.netloc:
        raise ConfigurationError(
            f"{urllib.parse.urlunsplit(parsed._replace(query=''))!r} is not a ZooKeeper state URL.",
            "write it as zk://host:port[,host2:port]/chroot, e.g. zk://zk1:2181,zk2:2181/dblog.",
        )
    chroot = parsed.path.rstrip("/") or DEFAULT_CHROOT
    options = dict(urllib.parse.parse_qsl(parsed.query))
    for key in options:
        if key not in URL_OPTIONS:
            # Not echoed with its value: someone may have tried ?password=...
            raise ConfigurationError(
                f"unknown option {key!r} in the ZooKeeper state URL.",
                f"remove it; the URL takes only {', '.join(URL_OPTIONS)}, credentials go into [state] "
                "auth_user and auth_password_env / auth_password_file.",
            )
    return parsed.netloc, chroot, options


class ZooKeeperStateStore:
    """StateStore over one ZooKeeper session. Thread-safe (kazoo serialises requests)."""

    def __init__(
        self,
        hosts: str,
        chroot: str = DEFAULT_CHROOT,
        timeout: float = DEFAULT_SESSION_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        auth: Optional[DigestAuth] = None,
        create: bool = True,
    ):
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoAuthError
        from kazoo.handlers.threading import KazooTimeoutError

        self.hosts = hosts
        self.chroot = "/" + chroot.strip("/") if chroot.strip("/") else ""
        self.session_timeout = float(timeout)
        self.auth = auth
        # Operations are retried over connection loss (a ZooKeeper restart, a leader
        # election in the ensemble) for at most one session timeout: past that the session
        # is gone anyway, and the caller should see the error instead of hanging.
        # Reconnect attempts come at most session_timeout/8 apart (0.5 s at 4 s), so an
        # outage shorter than the session timeout ends in a reconnect to the same session
        # well before the lease's suspend limit (one session timeout): the lease is kept.
        self.client = KazooClient(
            hosts=hosts,
            timeout=self.session_timeout,
            connection_retry={
                "max_tries": -1,
                "delay": 0.1,
                "backoff": 1.5,
                "max_jitter": 0.1,
                "max_delay": max(0.1, self.session_timeout / 8),
            },
            command_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0, "deadline": self.session_timeout},
            # kazoo sends the credentials again on every (re)connect and puts the ACL on every
            # create, transactions and the lease's ephemeral znodes included.
            auth_data=auth.auth_data if auth else None,
            default_acl=auth.acl if auth else None,
            logger=KAZOO_LOG,
        )
        try:
            self.client.start(timeout=connect_timeout)
        except KazooTimeoutError:
            self._stop_client()
            raise ConfigurationError(
                f"cannot reach ZooKeeper at {hosts} within {connect_timeout:.0f} s.",
                "check that the ZooKeeper servers are running and reachable from this host "
                "(e.g. `echo ruok | nc HOST PORT` answers imok), and that the state URL "
                "lists them as zk://host:port[,host:port]/chroot.",
            ) from None
        # ``create`` False: only a tree a capture made (its sources/ znode), checked before
        # anything is created; exists() needs no read right, so this holds under any ACL.
        if not create and self.client.retry(self.client.exists, self.path("sources")) is None:
            self._stop_client()
            raise no_capture_state(f"zk://{hosts}{self.chroot}", f"ZooKeeper has no {self.path('sources')}")
        try:
            if auth is not None:
                secure_chroot(self.client, self.chroot, auth)
            else:
                self.client.ensure_path(self.chroot or "/")
                self.client.get(self.chroot or "/")  # exists() passes any ACL; a read does not
        except NoAuthError:
            self._stop_client()
            raise refused(self.chroot, auth) from None
        except ConfigurationError:
            self._stop_client()
            raise

        self._dump_watches: dict[str, list[int]] = {}  # source id -> [changes seen]

    def __repr__(self) -> str:
        user = f", auth_user={self.auth.user!r}" if self.auth else ""
        return f"ZooKeeperStateStore({self.hosts!r}, chroot={self.chroot!r}{user})"

    # -- paths -------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        """Absolute znode path of ``parts`` (already-encoded names) under the chroot."""
        return self.chroot + "/" + "/".join(parts)

    def _source(self, source_id: str, *parts: str) -> str:
        return self.path("sources", encode_name(source_id), *parts)

    def _dump(self, source_id: str, dump_id: str, *parts: str) -> str:
        return self._source(source_id, "dumps", encode_name(dump_id), *parts)

    def _retry(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        from kazoo.exceptions import NoAuthError

        try:
            return self.client.retry(fn, *args, **kwargs)
        except NoAuthError:
            raise refused(self.chroot, self.auth) from None

    def _get(self, path: str) -> Optional[str]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._retry(self.client.get, path)
        except NoNodeError:
            return None
        return data.decode("utf-8")

    def _put(self, path: str, value: str) -> None:
        """Create or overwrite one znode (creating its parents)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        data = value.encode("utf-8")
        while True:
            try:
                self._retry(self.client.set, path, data)
                return
            except NoNodeError:
                pass
            try:
                self._retry(self.client.create, path, data, makepath=True)
                return
            except NodeExistsError:
                continue  # created concurrently (or by our own retried create): set it

    # -- checkpoints -------------------------------------------------------------------
    def get_checkpoint(self, source_id: str) -> Optional[Position]:
        text = self._get(self._source(source_id, "checkpoint"))
        return Position.parse(text) if text is not None else None

    def set_checkpoint(self, source_id: str, position: Position) -> None:
        self._put(self._source(source_id, "checkpoint"), position.encode())

    def clear_checkpoint(self, source_id: str) -> None:
        from kazoo.exceptions import NoNodeError

        try:
            self._retry(self.client.delete, self._source(source_id, "checkpoint"))
        except NoNodeError:
            pass

    # -- dumps -------------------------------------------------------------------------
    def add_dump(self, spec: DumpSpec, control: Optional[DumpControl] = None) -> None:
        self._retry(self.client.ensure_path, self._source(spec.source_id, "dumps"))
        self._retry(self.client.ensure_path, self.path("dump_ids"))

        def commit() -> list[Any]:
            tx = self.client.transaction()
            self.add_dump_ops(tx, spec, control)
            return list(tx.commit())

        self.dump_added(spec, self._retry(commit))

    def add_dump_ops(self, tx: Any, spec: DumpSpec, control: Optional[DumpControl]) -> None:
        """The creates of one dump, for one transaction: a reader sees the whole dump or nothing."""
        base = self._dump(spec.source_id, spec.dump_id)
        status = json.dumps({"status": DumpStatus.PENDING.value, "error": None, "updated_at": time.time()})
        tx.create(base, spec.to_json().encode())
        tx.create(base + "/control", _control_json(control or DumpControl()).encode())
        tx.create(base + "/status", status.encode())
        tx.create(base + "/progress", b"")
        tx.create(self.path("dump_ids", encode_name(spec.dump_id)), spec.source_id.encode())

    def dump_added(self, spec: DumpSpec, results: list[Any]) -> None:
        """Raise the first failure of ``add_dump_ops``' results, unless it is our own
        transaction retried after a lost answer."""
        from kazoo.exceptions import NoAuthError, NodeExistsError, RolledBackError

        failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if any(isinstance(r, NoAuthError) for r in failed):
            raise refused(self.chroot, self.auth)
        if failed:
            if (
                isinstance(failed[0], NodeExistsError)
                and self._get(self._dump(spec.source_id, spec.dump_id)) == spec.to_json()
            ):
                return
            raise failed[0]

    def dumps_version(self, source_id: str) -> int:
        """A number that moves when a dump request of the source is added or removed, read
        without a round trip: a children watch on the source's dumps counts the changes
        (kazoo sets it again after each change and after a lost session). The engine reads
        the requests again when it moves (core/scheduler.py)."""
        seen = self._dump_watches.get(source_id)
        if seen is None:
            from kazoo.recipe.watchers import ChildrenWatch

            path = self._source(source_id, "dumps")
            self._retry(self.client.ensure_path, path)
            seen = [0]

            def changed(_children: list[str], seen: list[int] = seen) -> None:
                seen[0] += 1

            ChildrenWatch(self.client, path, changed)
            self._dump_watches[source_id] = seen
        return seen[0]

    def _source_of(self, dump_id: str) -> Optional[str]:
        return self._get(self.path("dump_ids", encode_name(dump_id)))

    def get_dump(self, dump_id: str) -> Dump:
        source_id = self._source_of(dump_id)
        dump = self._load(source_id, dump_id) if source_id is not None else None
        if dump is None:
            raise RequestError(f"no dump with id {dump_id!r}.", "list dumps with `dblog status`.")
        return dump

    def list_dumps(self, source_id: Optional[str] = None) -> list[Dump]:
        from kazoo.exceptions import NoNodeError

        if source_id is None:
            try:
                sources = [decode_name(s) for s in self._retry(self.client.get_children, self.path("sources"))]
            except NoNodeError:
                return []
        else:
            sources = [source_id]
        dumps = []
        for sid in sources:
            try:
                ids = self._retry(self.client.get_children, self._source(sid, "dumps"))
            except NoNodeError:
                continue
            for name in ids:
                d = self._load(sid, decode_name(name))
                if d is not None:
                    dumps.append(d)
        dumps.sort(key=lambda d: (d.spec.created_at, d.dump_id))
        return dumps

    def _load(self, source_id: str, dump_id: str) -> Optional[Dump]:
        """One dump: its four parts are requested together (pipelined), then read."""
        from kazoo.exceptions import NoNodeError

        base = self._dump(source_id, dump_id)

        def fetch() -> Optional[Dump]:
            c = self.client
            spec_a, control_a, status_a = (
                c.get_async(base),
                c.get_async(base + "/control"),
                c.get_async(base + "/status"),
            )
            tables_a = c.get_children_async(base + "/progress")
            try:
                spec = DumpSpec.from_json(spec_a.get()[0].decode())
                control = DumpControl(**json.loads(control_a.get()[0].decode()))
                status = json.loads(status_a.get()[0].decode())
                tables = tables_a.get()
            except NoNodeError:
                return None
            parts = [(t, c.get_async(f"{base}/progress/{t}")) for t in tables]
            progress = {decode_name(t): TableProgress.from_json(a.get()[0].decode()) for t, a in parts}
            return Dump(spec, control, DumpStatus(status["status"]), progress, status["error"], status["updated_at"])

        return self._retry(fetch)

    def set_control(self, dump_id: str, control: DumpControl) -> None:
        from kazoo.exceptions import NoNodeError

        source_id = self._source_of(dump_id)
        try:
            if source_id is None:
                raise NoNodeError()
            self._retry(self.client.set, self._dump(source_id, dump_id, "control"), _control_json(control).encode())
        except NoNodeError:
            raise RequestError(f"no dump with id {dump_id!r}.", "list dumps with `dblog status`.") from None

    def set_status(self, dump_id: str, status: DumpStatus, error: Optional[str] = None) -> None:
        from kazoo.exceptions import NoNodeError

        source_id = self._source_of(dump_id)
        if source_id is None:
            return  # like the local store: a status for an unknown dump changes nothing
        data = json.dumps({"status": status.value, "error": error, "updated_at": time.time()}).encode()
        try:
            self._retry(self.client.set, self._dump(source_id, dump_id, "status"), data)
        except NoNodeError:
            pass

    def save_progress(self, dump_id: str, table: str, progress: TableProgress) -> None:
        source_id = self._source_of(dump_id)
        if source_id is None:
            return
        self._put(self._dump(source_id, dump_id, "progress", encode_name(table)), progress.to_json())

    # -- small values ------------------------------------------------------------------
    def put_value(self, key: str, value: str) -> None:
        self._put(self.path("values", encode_name(key)), value)

    def get_value(self, key: str) -> Optional[str]:
        return self._get(self.path("values", encode_name(key)))

    def fenced(self, fence: Fence) -> "FencedZooKeeperStore":
        return FencedZooKeeperStore(self, fence)

    def close(self) -> None:
        # stop() ends the session at once: its ephemeral znodes (a held lease) go with it,
        # so a standby takes over without waiting for the session timeout.
        self._stop_client()

    def _stop_client(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()


def _control_json(c: DumpControl) -> str:
    return c.to_json()


def _set_data(path: str, data: bytes, version: int = -1) -> Callable[[Any], None]:
    """A transaction step: set ``path`` (only at ``version``, unless -1)."""
    return lambda tx: tx.set_data(path, data, version=version)


class FencedZooKeeperStore:
    """``ZooKeeperStateStore.fenced``: the lease holder's view. Reads go to the store; each
    write is one ZooKeeper transaction that first checks the holder's contender znode (it
    vanishes with the holder's session, so a write retried by kazoo in a new session after
    an expiry fails) and the epoch znode's version (a newer leader has moved it). Either
    check failing rolls the write back and raises StaleEpochError."""

    def __init__(self, store: ZooKeeperStateStore, fence: Fence):
        self._store = store
        self._fence = fence
        self._epoch_path = store._source(fence.source_id, "leader", "epoch")
        # Parents of what is written below, made while this process surely holds the lease
        # (a transaction cannot create missing parents).
        store._retry(store.client.ensure_path, store.path("values"))
        store._retry(store.client.ensure_path, store._source(fence.source_id, "dumps"))
        store._retry(store.client.ensure_path, store.path("dump_ids"))

    def __getattr__(self, name: str) -> Any:  # reads and user-side writes: the store's own
        return getattr(self._store, name)

    def fenced(self, fence: Fence) -> "FencedZooKeeperStore":
        return FencedZooKeeperStore(self._store, fence)

    def _commit(self, op: Callable[[Any], None]) -> Any:
        """Run ``op(transaction)`` behind the two fence checks; returns the op's own result
        (an exception instance when it failed for a reason of its own, e.g. NoNodeError), or
        the list of results when ``op`` added several operations."""
        from kazoo.exceptions import NoAuthError, RolledBackError

        def commit() -> list[Any]:
            tx = self._store.client.transaction()  # a new one per attempt: kazoo commits one once
            tx.check(self._fence.holder, 0)  # contender znodes are never modified: version 0
            tx.check(self._epoch_path, self._fence.version)
            op(tx)
            return list(tx.commit())

        holder, epoch, *results = self._store._retry(commit)
        if any(isinstance(r, NoAuthError) for r in (holder, epoch, *results)):
            # the tree was secured under a process without credentials: say so, not "lost lease"
            raise refused(self._store.chroot, self._store.auth)
        if isinstance(holder, Exception) and not isinstance(holder, RolledBackError):
            raise lease_lost(self._fence.source_id, self._fence.epoch, "its ZooKeeper znode is gone")
        if isinstance(epoch, Exception) and not isinstance(epoch, RolledBackError):
            raise lease_lost(self._fence.source_id, self._fence.epoch, "a newer leader has taken the next epoch")
        return results[0] if len(results) == 1 else results

    def _put(self, path: str, value: str) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        data = value.encode("utf-8")
        while True:
            result = self._commit(_set_data(path, data))
            if not isinstance(result, NoNodeError):
                break
            result = self._commit(lambda tx: tx.create(path, data))
            if not isinstance(result, NodeExistsError):
                break  # else created concurrently: set it
        if isinstance(result, Exception):
            raise result

    # -- the engine's writes ------------------------------------------------------------
    def add_dump(self, spec: DumpSpec, control: Optional[DumpControl] = None) -> None:
        """A dump the capture requests itself (e.g. to repair unchanged TOAST values)."""
        self._store.dump_added(spec, self._commit(lambda tx: self._store.add_dump_ops(tx, spec, control)))

    def set_checkpoint(self, source_id: str, position: Position) -> None:
        """Only forwards: a position at or below the stored one is not written."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = self._store._source(source_id, "checkpoint")
        data = position.encode().encode()
        while True:
            try:
                stored, stat = self._store._retry(self._store.client.get, path)
            except NoNodeError:
                result = self._commit(lambda tx: tx.create(path, data))
            else:
                if stored and Position.parse(stored.decode()) >= position:
                    return
                result = self._commit(_set_data(path, data, stat.version))
            if isinstance(result, (BadVersionError, NodeExistsError, NoNodeError)):
                continue  # written meanwhile (by ourselves, retried): compare again
            if isinstance(result, Exception):
                raise result
            return

    def clear_checkpoint(self, source_id: str) -> None:
        from kazoo.exceptions import NoNodeError

        result = self._commit(lambda tx: tx.delete(self._store._source(source_id, "checkpoint")))
        if isinstance(result, Exception) and not isinstance(result, NoNodeError):
            raise result

    def set_status(self, dump_id: str, status: DumpStatus, error: Optional[str] = None) -> None:
        from kazoo.exceptions import NoNodeError

        source_id = self._store._source_of(dump_id)
        if source_id is None:
            return
        data = json.dumps({"status": status.value, "error": error, "updated_at": time.time()}).encode()
        path = self._store._dump(source_id, dump_id, "status")
        result = self._commit(_set_data(path, data))
        if isinstance(result, Exception) and not isinstance(result, NoNodeError):
            raise result

    def save_progress(self, dump_id: str, table: str, progress: TableProgress) -> None:
        source_id = self._store._source_of(dump_id)
        if source_id is not None:
            self._put(self._store._dump(source_id, dump_id, "progress", encode_name(table)), progress.to_json())

    def put_value(self, key: str, value: str) -> None:
        self._put(self._store.path("values", encode_name(key)), value)
