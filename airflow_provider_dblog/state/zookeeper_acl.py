"""Digest authentication and ACLs for the ZooKeeper state store (docs/state.md,
"Authentication and ACLs").

With credentials, every znode the store creates under its chroot carries one ACL entry,
``digest:<user>:<hash>`` with all permissions (kazoo's ``default_acl``), so a client without
them can neither read nor write anything there. A chroot created before authentication was
turned on is secured once, on the first start with credentials (``secure_chroot``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, Optional

from ..core.errors import ConfigurationError

log = logging.getLogger(__name__)

DEFAULT_USER_ENV = "DBLOG_STATE_USER"
DEFAULT_PASSWORD_ENV = "DBLOG_STATE_PASSWORD"
# Created under the chroot once every znode there carries our ACL: later starts skip the walk.
MARKER = "acl"
DOCS = 'docs/state.md, "Authentication and ACLs"'


def check_user(user: str) -> None:
    if not user:
        raise ConfigurationError("the ZooKeeper auth_user is empty.", "set [state] auth_user to the digest user.")
    if ":" in user:
        # Not echoed: a user who wrote "name:password" here would see the password printed.
        raise ConfigurationError(
            "the ZooKeeper auth_user contains ':', which a digest user name cannot contain.",
            "set auth_user to the user name alone; the password goes into the environment variable "
            f"named by auth_password_env (default {DEFAULT_PASSWORD_ENV}) or the file named by auth_password_file.",
        )


@dataclasses.dataclass(frozen=True)
class DigestAuth:
    """ZooKeeper digest credentials. The password never appears in ``repr`` or errors."""

    user: str
    password: str = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        check_user(self.user)
        if not self.password:
            raise ConfigurationError(
                f"the ZooKeeper password of auth_user {self.user!r} is empty.",
                f"put the password into the environment variable named by auth_password_env "
                f"(default {DEFAULT_PASSWORD_ENV}) or into the file named by auth_password_file.",
            )

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[Any]:
        from kazoo.security import make_digest_acl

        return [make_digest_acl(self.user, self.password, all=True)]


class RedactAuth(logging.Filter):
    """kazoo logs every request it sends at DEBUG, its Auth packet ("user:password") too."""

    def filter(self, record: logging.LogRecord) -> bool:
        from kazoo.protocol.serialization import Auth

        if isinstance(record.args, tuple) and any(isinstance(a, Auth) for a in record.args):
            record.args = tuple(a._replace(auth="<redacted>") if isinstance(a, Auth) else a for a in record.args)
        return True


# The store's kazoo clients log here: a child of kazoo's own logger, so its configuration
# (level, handlers) still applies, with the filter in front.
KAZOO_LOG = logging.getLogger("kazoo.client.dblog")
KAZOO_LOG.addFilter(RedactAuth())


def refused(chroot: str, auth: Optional[DigestAuth]) -> ConfigurationError:
    """The error for a NoAuthError: which credentials were refused, and what to do."""
    where = chroot or "/"
    if auth is None:
        return ConfigurationError(
            f"ZooKeeper refused access to {where} without credentials: the state tree is protected by ACLs.",
            "set [state] auth_user and put its password into the environment variable named by "
            f"auth_password_env (default {DEFAULT_PASSWORD_ENV}) or the file named by auth_password_file "
            f"(in a dblog_state connection: the same names as extras); see {DOCS}.",
        )
    return ConfigurationError(
        f"ZooKeeper refused digest user {auth.user!r} access to {where}: the state tree is protected by "
        "other credentials (a different user or password).",
        "use the user and password the tree was secured with; if they are lost, a ZooKeeper superuser "
        f"can reset the tree's ACLs ({DOCS}).",
    )


def _acl_key(acls: list[Any]) -> list[tuple[int, str, str]]:
    return sorted((a.perms, a.id.scheme, a.id.id) for a in acls)


def secure_tree(client: Any, root: str, acl: list[Any]) -> int:
    """Give every znode under ``root`` (``root`` included) exactly ``acl``; returns how many
    changed. Top-down, each node's ACL set before its children are listed: once a node is
    ours nobody else can add a child to it, so the listing misses no open znode."""
    from kazoo.exceptions import NoNodeError

    want = _acl_key(acl)
    changed = 0
    todo = [root]
    while todo:
        path = todo.pop()
        try:
            acls, _ = client.retry(client.get_acls, path)
            if _acl_key(acls) != want:
                client.retry(client.set_acls, path, acl)
                changed += 1
            todo.extend(f"{path}/{child}" for child in client.retry(client.get_children, path))
        except NoNodeError:
            continue  # gone meanwhile: an ephemeral lease contender, a deleted dump
    return changed


def secure_chroot(client: Any, chroot: str, auth: DigestAuth) -> int:
    """Make sure ``chroot`` exists and every znode under it carries ``auth``'s ACL; returns
    how many existing znodes had to be changed (0 on every start after the first).
    NoAuthError escapes: the tree belongs to other credentials."""
    from kazoo.exceptions import NodeExistsError, NoNodeError
    from kazoo.security import OPEN_ACL_UNSAFE

    if not chroot:
        raise ConfigurationError(
            "ZooKeeper authentication needs a chroot of its own, not the root znode.",
            "give the state URL a chroot, e.g. zk://zk1:2181/dblog.",
        )
    parent = chroot.rsplit("/", 1)[0]
    if parent:
        # Above the chroot is a namespace shared with other applications: parents we create
        # there are left open, as ZooKeeper creates them itself.
        client.retry(client.ensure_path, parent, acl=OPEN_ACL_UNSAFE)
    try:
        client.retry(client.create, chroot, b"", acl=auth.acl)
        changed = 0  # new and empty: nothing to secure
    except NodeExistsError:
        try:
            client.retry(client.get, f"{chroot}/{MARKER}")
            return 0
        except NoNodeError:
            changed = secure_tree(client, chroot, auth.acl)
    marker = json.dumps({"scheme": "digest", "user": auth.user, "secured_at": time.time()}).encode()
    try:
        client.retry(client.create, f"{chroot}/{MARKER}", marker, acl=auth.acl)
    except NodeExistsError:
        pass  # another process secured it at the same time
    if changed:
        log.warning("secured %d existing znodes under %s with the ACL of digest user %r", changed, chroot, auth.user)
    return changed
