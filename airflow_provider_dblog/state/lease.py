"""Leader leases with fencing epochs (DESIGN invariant 7): ZooKeeper across machines
(``zookeeper_lease.py``), a file lock on one machine (``local_lease.py``), each beside its
store. The protocol is ``core.protocols.LeaderLease``.

A lease coordinates only the captures that share its store: its ``domain`` (a short hash
of the store's identity) lets a source tell the previous leader of its own store (deposed,
so ended at once) from a capture coordinated by another store (docs/state.md).
"""

from __future__ import annotations

from typing import Optional

from ..core.protocols import LeaderLease, StateStore
from .lease_common import default_identity
from .local import LocalStateStore
from .local_lease import LocalLease
from .zookeeper import ZooKeeperStateStore, encode_name
from .zookeeper_lease import ZooKeeperLease

__all__ = ["LeaderLease", "ZooKeeperLease", "LocalLease", "make_lease", "default_identity"]


def make_lease(state: StateStore, source_id: str, identity: Optional[str] = None) -> LeaderLease:
    """The lease that matches the state store: ZooKeeper's, or a file lock next to SQLite."""
    if isinstance(state, ZooKeeperStateStore):
        return ZooKeeperLease(state, source_id, identity)
    if isinstance(state, LocalStateStore):
        return LocalLease(state, f"{state.path}.leader-{encode_name(source_id)}.lock", source_id, identity)
    raise TypeError(f"no leader lease for a {type(state).__name__}")
