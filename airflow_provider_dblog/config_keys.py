"""Every key of the config file and what its value must be: one table, one check.

A value of the wrong type or out of range stops with an error that names the key, what it
must be and the value given (DESIGN invariant 8): never a Python traceback from deep in a
source, and never a silent cast (``port = 5432.9`` is not port 5432, ``tables = "db.t"``
is not a list of five one-letter tables). Values that may hold a secret are not shown:
the keys that would carry a password are refused by their builders with their own fix, and
a host or URL with credentials in it (``user:password@``) is refused without repeating it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from typing import Any, Callable, Optional, Sequence

from .core.errors import ConfigurationError, has_userinfo
from .sources.tls import MODES as TLS_MODES
from .sources.tls import TLS_KEYS


@dataclasses.dataclass(frozen=True)
class Kind:
    """What a key's value must be. ``expected`` completes "[section] key must be ...";
    ``example`` is a valid value in TOML; ``hint`` adds to the fix."""

    expected: str
    example: str
    accepts: Callable[[Any], bool]
    hint: str = ""
    no_credentials: bool = False  # a host or URL: refuse ``user:password@`` in it
    secret: bool = False  # the value is never checked or shown here: its builder refuses it


def _text(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def integer(lo: int, hi: int, example: int) -> Kind:
    # type() and not isinstance(): a TOML true is a bool, which is an int to Python
    return Kind(f"an integer from {lo} to {hi}", str(example), lambda v: type(v) is int and lo <= v <= hi)


def choice(*values: str) -> Kind:
    return Kind(
        "one of " + ", ".join(repr(v) for v in values),
        f'"{values[0]}"',
        lambda v: isinstance(v, str) and v.lower() in values,
    )


def text_list(what: str, example: str, hint: str = "") -> Kind:
    return Kind(
        f"a non-empty list of {what}",
        example,
        lambda v: isinstance(v, list) and bool(v) and all(map(_text, v)),
        hint,
    )


TEXT = Kind("a non-empty string", '"..."', _text)
PATH = Kind("a non-empty string (a file path)", '"/path/to/file"', _text)
HOST = Kind(
    "a host name or address (host:port,host:port for a MySQL/MariaDB GTID list)",
    '"db.internal"',
    _text,
    no_credentials=True,
)
URL = Kind("a non-empty string (a URL or path)", '"delta:///data/lake"', _text, no_credentials=True)
ENV_NAME = Kind(
    "the name of an environment variable",
    '"DBLOG_SOURCE_PASSWORD"',
    lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) is not None,
)
BOOL = Kind("true or false", "true", lambda v: isinstance(v, bool), "a TOML boolean, no quotes")
SECONDS = Kind("a number of seconds above 0", "10", lambda v: _number(v) and v > 0)
SECRET = Kind("", "", lambda v: True, secret=True)
KEY_COLUMNS = Kind(
    'a table of "schema.table" = ["column", ...]',
    '{ "public.events" = ["event_id"] }',
    lambda v: (
        isinstance(v, dict)
        and all(_text(t) and isinstance(c, list) and bool(c) and all(map(_text, c)) for t, c in v.items())
    ),
)

_TLS_KINDS = {
    "sslmode": choice(*TLS_MODES),
    "sslrootcert": PATH,
    "sslcert": PATH,
    "sslkey": PATH,
    "sslpassword_env": ENV_NAME,
    "sslpassword_file": PATH,
    "sslpassword": SECRET,
}
assert set(_TLS_KINDS) == set(TLS_KEYS), "every TLS key needs its kind"

# Every section, every key it may hold, and what the value must be. A key not here is an
# error naming the closest valid one (a typo such as `tabels` would otherwise capture
# every table). The ``*password`` keys are here so that their builders refuse them with
# their own fix (put the password into a variable or a file).
KEYS: dict[str, dict[str, Kind]] = {
    "source": {
        "type": choice("postgres", "postgresql", "pg", "mysql", "mariadb"),
        "id": TEXT,
        "host": HOST,
        "port": integer(1, 65535, 5432),
        "user": TEXT,
        "database": TEXT,
        "databases": text_list("database names", '["shop"]'),
        "password_env": ENV_NAME,
        "password_file": PATH,
        "password": SECRET,
        "tables": text_list('"schema.table" names', '["public.orders"]', "leave tables out to capture every table"),
        "key_columns": KEY_COLUMNS,
        "plugin": choice("pgoutput", "wal2json"),
        "slot_name": TEXT,
        "publication": TEXT,
        "server_id": integer(1, 2**32 - 1, 4242),  # MySQL's server_id is 32-bit; 0 cannot replicate
        "use_gtid": BOOL,
        "replicas": text_list('"host:port" strings', '["db2:3306"]'),
        "watermark_schema": TEXT,
        **_TLS_KINDS,
    },
    "state": {
        "path": PATH,
        "url": URL,
        "zookeeper": HOST,
        "chroot": Kind(
            'a ZooKeeper path starting with "/" (or "" for the default)',
            '"/dblog"',
            lambda v: isinstance(v, str) and (v == "" or v.startswith("/")),
        ),
        "session_timeout": SECONDS,
        "auth_user": TEXT,
        "auth_password_env": ENV_NAME,
        "auth_password_file": PATH,
        "auth_password": SECRET,
    },
    "output": {"url": URL},
}
SECTIONS = {section: tuple(keys) for section, keys in KEYS.items()}


def closest(name: str, valid: Sequence[str]) -> str:
    """'did you mean X?' for the closest valid name, or the list of valid names."""
    match = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return f"did you mean {match[0]!r}?" if match else f"valid: {', '.join(valid)}."


def _described(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    return f"{value!r} ({names.get(type(value), type(value).__name__)})"


def check_value(section: str, key: str, value: Any, where: str = "the configuration") -> None:
    """ConfigurationError unless ``value`` is what ``[section] key`` must be (see ``KEYS``)."""
    kind = KEYS[section][key]
    if kind.secret:
        return
    if kind.no_credentials and isinstance(value, str) and ("@" in value if kind is HOST else has_userinfo(value)):
        raise ConfigurationError(
            f"[{section}] {key} carries credentials (user:password@) ({where}); the value is not shown: "
            "a host or URL ends up in process lists, logs and Airflow's UI.",
            f"remove them from {key}: passwords come from the environment variable or file that "
            "password_env / password_file (auth_password_env / auth_password_file for ZooKeeper) name, and an "
            "object store's keys from its usual environment variables.",
        )
    if not kind.accepts(value):
        hint = f"; {kind.hint}" if kind.hint else ""
        raise ConfigurationError(
            f"[{section}] {key} must be {kind.expected}, not {_described(value)} ({where}).",
            f"write e.g. {key} = {kind.example}{hint}.",
        )


def check_keys(section: str, values: dict[str, Any], where: str = "the configuration") -> None:
    """ConfigurationError naming the first key of ``[section]`` that DBLog does not know (and
    the closest valid one), or whose value is of the wrong type or out of range."""
    valid = SECTIONS[section]
    for key, value in values.items():
        if key not in valid:
            raise ConfigurationError(
                f"unknown key {key!r} in [{section}] of {where}.",
                f"remove or correct it ({closest(key, valid)})",
            )
        if value is not None:  # None: not set (the Airflow hook's and programs' dicts)
            check_value(section, key, value, where)


def number_option(text: str, name: str, kind: Kind) -> Optional[float]:
    """A number given as text (a URL option such as ``?session_timeout=10``), checked as
    ``kind``; ConfigurationError naming ``name`` otherwise."""
    try:
        value: Any = float(text)
    except ValueError:
        value = text
    if not kind.accepts(value):
        raise ConfigurationError(f"{name} must be {kind.expected}, not {text!r}.", f"write e.g. {name}={kind.example}.")
    return float(value)
