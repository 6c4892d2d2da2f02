"""Build a Source, a StateStore and an Output from a config file plus command-line options.

Config file (TOML), every key optional, command-line options override it::

    [source]
    type = "postgres"            # or "mysql" (MariaDB too)
    id = "shop"                  # source id: names the slot, publication, watermark row
    host = "127.0.0.1"
    port = 5432
    user = "dblog"
    database = "shop"            # PostgreSQL database; for MySQL the default database
    password_env = "DBLOG_SOURCE_PASSWORD"   # name of the variable holding the password
    # password_file = "/run/secrets/dblog"   # or a file holding it
    # sslmode = "verify-full"                # TLS (sources/tls.py): disable ... verify-full
    # sslrootcert = "/etc/dblog/ca.pem"      # CA of the server's certificate
    # sslcert = "client.pem"  sslkey = "client.key"  sslpassword_env = "DBLOG_SSL_KEY_PASSWORD"
    tables = ["public.orders"]   # omit for every table
    key_columns = { "public.events" = ["event_id"] }   # for tables without a primary key
    plugin = "pgoutput"          # PostgreSQL: pgoutput or wal2json
    server_id = 4242             # MySQL: replica id of the binlog reader
    # use_gtid = true            # MySQL: GTID positions (survive a failover; host = "db1:3306,db2:3306")
    watermark_schema = "dblog"
    # watermarks = "log"         # read-only dumps: nothing written (PostgreSQL, MariaDB)

    [state]
    path = "dblog-state/state.db"   # the embedded store (SQLite), or instead:
    # url = "zk://zk1:2181,zk2:2181/dblog"   # ZooKeeper (or zookeeper = "hosts" + chroot)
    # session_timeout = 10                   # seconds; bounds failover time (docs/state.md)
    # auth_user = "dblog"                    # ZooKeeper digest auth + ACLs (default: $DBLOG_STATE_USER)
    # auth_password_env = "DBLOG_STATE_PASSWORD"   # variable holding its password (the default)
    # auth_password_file = "/run/secrets/zk"       # or a file holding it

    [output]
    url = "delta://dblog-lake"      # delta://DIR, jsonl://DIR or python:module:function

Passwords never come from argv: only from the environment or a file (invariant 8).
An unknown section or key is an error that names it and the closest valid one, and a value
of the wrong type or out of range one that names the key, what it must be and the value
(``check_config``, the table in config_keys.py): a typo must not silently change what is
captured, and a wrong value must not end in a traceback or a silent cast.

``load_config`` reads such a file; ``render_config`` / ``write_private_config`` write one
(the Airflow trigger hands its capture child the configuration this way).
"""

from __future__ import annotations

import math
import os
import re
import sys
import tempfile
from typing import Any, Optional

from . import sources
from .config_keys import KEYS, SECONDS, SECTIONS, check_keys, closest, number_option
from .core import names
from .core.errors import ConfigurationError, RequestError, without_userinfo
from .sources.tls import tls_settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_PASSWORD_ENV = "DBLOG_SOURCE_PASSWORD"


# The keys of [state] that configure ZooKeeper digest authentication (refused for a local store).
STATE_AUTH_KEYS = tuple(k for k in KEYS["state"] if k.startswith("auth_"))


def check_config(config: dict[str, Any], where: str = "the configuration") -> dict[str, Any]:
    """``config`` if every section and key is one DBLog knows, else ConfigurationError
    naming the unknown one and the closest valid one."""
    for section, values in config.items():
        if section not in SECTIONS:
            raise ConfigurationError(
                f"unknown section [{section}] in {where}.",
                f"remove or correct it ({closest(section, list(SECTIONS))})",
            )
        if not isinstance(values, dict):
            raise ConfigurationError(
                f"{section} in {where} is a value, not a section.", f"write it as a table: [{section}] on its own line."
            )
        check_keys(section, values, where)
    return config


def read_toml(path: str) -> dict[str, Any]:
    """The file's TOML as a dict, unchecked (``load_config`` checks it)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigurationError(f"config file {path} does not exist.", "pass an existing file to --config.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path} is not valid TOML: {exc}.", "fix the file's syntax.") from None


def load_config(path: Optional[str]) -> dict[str, Any]:
    """The config file (``path``, else ``DBLOG_CONFIG``; none: ``{}``), every section and key
    checked: an unknown one is a ConfigurationError naming it and the closest valid one."""
    path = path or os.environ.get("DBLOG_CONFIG")
    if not path:
        return {}
    return check_config(read_toml(path), f"config file {path}")


# -- writing the file ------------------------------------------------------------------
# tomllib only reads; the writer covers what the config holds (strings, numbers, booleans,
# lists and nested tables) and tests/unit/test_config.py reads every kind back.
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(text: str) -> str:
    """A TOML basic string: quote, backslash and control characters escaped."""
    return (
        '"'
        + "".join(_ESCAPES.get(ch) or (f"\\u{ord(ch):04X}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch) for ch in text)
        + '"'
    )


def _toml_key(key: Any) -> str:
    key = str(key)
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_value(v: Any) -> str:
    if isinstance(v, dict):  # an inline table
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    return _toml_string(str(v))


def render_config(config: dict[str, dict[str, Any]]) -> str:
    """The TOML text of ``{section: {key: value}}`` that ``load_config`` reads back as the
    same dict. None values are left out (TOML has no null)."""
    lines: list[str] = []
    for section, values in config.items():
        lines.append(f"[{_toml_key(section)}]")
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        lines.append("")
    return "\n".join(lines)


def write_private_config(config: dict[str, dict[str, Any]]) -> str:
    """Write ``config`` to a new file only this user can read (mode 0600); returns its path.
    The caller deletes it. Refuses a password: it travels in the environment only."""
    if "password" in config.get("source", {}):  # belt and braces: the hook never puts it there
        raise ValueError("refusing to write a password into the capture config file")
    fd, path = tempfile.mkstemp(prefix="dblog-capture-", suffix=".toml")  # mode 0600
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(render_config(config))
    return path


def read_password(src: dict[str, Any]) -> Optional[str]:
    """The password from ``password_file``, or from the variable ``password_env`` names
    (which must then be set; empty: no password). Without either, ``DBLOG_SOURCE_PASSWORD``
    if set (none: the server's password-less methods, e.g. trust or peer)."""
    if src.get("password_file"):
        try:
            with open(src["password_file"], encoding="utf-8") as f:
                return f.read().strip()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the password file {src['password_file']}: {exc.strerror}.",
                "point password_file at a readable file that holds only the password.",
            ) from None
    if "password" in src:
        raise ConfigurationError(
            "a password was given in the configuration.",
            "put it in an environment variable named by password_env, or in a file named by password_file.",
        )
    env = src.get("password_env")
    if env and env not in os.environ:
        # Else the server's "access denied" would be all the operator sees.
        raise ConfigurationError(
            f"password_env names the environment variable {env}, which is not set.",
            f"export {env} (holding the source password) in the environment of every dblog process "
            "(Airflow: workers and triggerers), or name a file holding it with password_file.",
        )
    return os.environ.get(env or DEFAULT_PASSWORD_ENV)


def _table_names(tables: Any, key: str) -> list[str]:
    """Configured table names in the one spelling of core/names.py (``"e"."t"`` is ``e.t``),
    so that they match the names the capture writes; a malformed one is refused."""
    try:
        return [names.canonical(t) for t in tables or ()]
    except RequestError as exc:
        raise ConfigurationError(f"[source] {key}: {exc.cause}", exc.fix) from None


def make_source(src: dict[str, Any], password: Optional[str] = None):
    """The source described by ``src``; ``password`` (from an Airflow connection, in memory)
    takes the place of ``password_env`` / ``password_file``."""
    check_keys("source", src)
    kind = (src.get("type") or "").lower()
    if not src.get("id"):
        raise ConfigurationError("the source has no id.", "set [source] id or pass --source-id.")
    from .outputs.lake_layout import require_segment

    require_segment(str(src["id"]))  # it names the source's directories in the lake
    common = dict(
        source_id=src["id"],
        host=src.get("host", "127.0.0.1"),
        user=src.get("user"),
        password=password if password is not None else read_password(src),
        tables=_table_names(src.get("tables"), "tables") or None,
        key_columns=dict(zip(_table_names(keys, "key_columns"), keys.values()))
        if (keys := src.get("key_columns"))
        else None,
        tls=tls_settings(src),
    )
    source = sources.descriptor(kind)
    if source is None:
        raise ConfigurationError(
            f"unknown source type {src.get('type')!r}.",
            f"set [source] type (or --source-type) to {' or '.join(d.kind for d in sources.descriptors())}.",
        )
    return source.make(src, common)


def read_state_auth(state: dict[str, Any]):
    """The ZooKeeper digest credentials of ``[state]``, or None without ``auth_user`` (nor
    ``DBLOG_STATE_USER``). The password comes from ``auth_password_file`` or the variable
    named by ``auth_password_env`` (default ``DBLOG_STATE_PASSWORD``), never the config itself."""
    from .state.zookeeper_acl import DEFAULT_PASSWORD_ENV, DEFAULT_USER_ENV, DigestAuth, check_user

    if "auth_password" in state:
        raise ConfigurationError(
            "a ZooKeeper password (auth_password) was given in the configuration.",
            f"put it in an environment variable named by auth_password_env (default {DEFAULT_PASSWORD_ENV}) "
            "or in a file named by auth_password_file.",
        )
    user = state.get("auth_user") or os.environ.get(DEFAULT_USER_ENV)
    if not user:
        if state.get("auth_password_env") or state.get("auth_password_file"):
            raise ConfigurationError(
                "[state] names a ZooKeeper password (auth_password_env / auth_password_file) but no user.",
                f"set [state] auth_user (or the environment variable {DEFAULT_USER_ENV}).",
            )
        return None
    check_user(user)  # before any message names the user
    if state.get("auth_password_file"):
        path = state["auth_password_file"]
        try:
            with open(path, encoding="utf-8") as f:
                password = f.read().rstrip("\r\n")  # the file's line end is not part of it
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the ZooKeeper password file {path}: {exc.strerror}.",
                "point auth_password_file at a file this user can read that holds only the password.",
            ) from None
        if not password:
            raise ConfigurationError(
                f"the ZooKeeper password file {path} is empty.", "write the password of auth_user into it."
            )
    else:
        env = state.get("auth_password_env") or DEFAULT_PASSWORD_ENV
        password = os.environ.get(env, "")
        if not password:
            raise ConfigurationError(
                f"ZooKeeper auth_user {user!r} is set but the environment variable {env} holding its "
                "password is not set or empty.",
                f"export {env} in the environment of every dblog process (Airflow: workers and triggerers), "
                "or name a file holding the password with auth_password_file.",
            )
    return DigestAuth(user, password)


def make_state(state: dict[str, Any], create: bool = True):
    """The local SQLite store (``path``) or the ZooKeeper store (``url = "zk://..."``, or
    ``zookeeper = "host:port,..."`` with ``chroot``); ``--state`` may be either form.
    ``auth_user`` and its password turn on ZooKeeper digest authentication and ACLs.
    ``create`` False: only a store a capture made (ConfigurationError otherwise, nothing created)."""
    check_keys("state", state)
    url = state.get("url") or state.get("path") or os.environ.get("DBLOG_STATE") or "dblog-state/state.db"
    if state.get("zookeeper") and not state.get("url"):
        url = f"zk://{state['zookeeper']}{state.get('chroot', '')}"
    if url.startswith(("zk://", "zookeeper://")):
        from .state.zookeeper import ZooKeeperStateStore, parse_zk_url

        hosts, chroot, options = parse_zk_url(url)
        timeout = state.get("session_timeout")
        if "session_timeout" in options:
            timeout = number_option(options["session_timeout"], "the state URL's session_timeout", SECONDS)
        auth = read_state_auth(state)
        return ZooKeeperStateStore(hosts, chroot, **({"timeout": timeout} if timeout else {}), auth=auth, create=create)
    # Any scheme but zk:// is an error, a mistyped one (zk:/host) included: taken for a file
    # name, it would quietly give a high-availability deployment a local store.
    if re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", url) and not re.match(r"[A-Za-z]:[\\/]", url):
        raise ConfigurationError(
            f"unknown state store URL {without_userinfo(url)!r}.",
            "pass a file path for the local store or zk://host:port[,host:port]/chroot for ZooKeeper "
            "(./name for a file whose name has a colon).",
        )
    given = [k for k in STATE_AUTH_KEYS if k in state]
    if given:
        raise ConfigurationError(
            f"[state] sets {', '.join(given)}, but the state store is the local file {url}: "
            "authentication applies to ZooKeeper only.",
            'remove the auth_* keys, or point the state store at ZooKeeper (url = "zk://host:port/chroot").',
        )
    from .state.local import LocalStateStore

    return LocalStateStore(url, create=create)


def make_output(out: dict[str, Any]):
    check_keys("output", out)
    from .outputs import make_output as _make

    return _make(out.get("url") or os.environ.get("DBLOG_OUTPUT") or "delta://dblog-lake")
