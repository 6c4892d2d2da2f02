"""What the leases and the fenced stores share: who a contender is, which store coordinates
it, and the error a deposed leader gets (DESIGN invariant 7). Kept apart from the leases so
that a store's fenced view and its lease import it without importing each other.
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Optional

from ..core.errors import StaleEpochError


def default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def coordination_domain(store_identity: str) -> str:
    """A short tag of the store that coordinates a source's captures: equal for every capture
    whose leases exclude each other, different for captures with separate stores."""
    return hashlib.sha256(store_identity.encode()).hexdigest()[:12]


def lease_lost(source_id: str, epoch: Optional[int], why: str) -> StaleEpochError:
    return StaleEpochError(
        f"lost the leader lease of source {source_id!r} (epoch {epoch}): {why}. This process "
        "stops writing; another capture instance may already be the leader.",
        "nothing to repair: restart this process to rejoin as standby; the leader resumes "
        "from the output's last position.",
    )
