"""Every key of the config file and what its value must be: one table, one check.

A value of the wrong type or out of range stops with an error that names the key, what it
must be and the value given (DESIGN invariant 8): never a Python traceback from deep in a
source, and never a silent cast (``port = 5432.9`` is not port 5432, ``tables = "db.t"``
is not a list of five one-letter tables). Values that may hold a secret are not shown:
the keys that would carry a password are refused by their builders with their own fix, and
a host or URL with credentials in it (``user:password@``) is refused without repeating it.
"""

from __future__ import annotations

import difflib
from typing import Any, Optional, Sequence

from .config_kinds import (
    ENV_NAME,
    HOST,
    KEY_COLUMNS,
    PATH,
    SECONDS,
    SECRET,
    TEXT,
    URL,
    Kind,
    choice,
    integer,
    text_list,
)
from .core.errors import ConfigurationError, has_userinfo
from .sources import descriptors
from .sources.tls import MODES as TLS_MODES
from .sources.tls import TLS_KEYS

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
        "type": choice(*(name for d in descriptors() for name in (d.kind, *d.aliases))),
        "id": TEXT,
        "host": HOST,
        "port": integer(1, 65535, 5432),
        "user": TEXT,
        "database": TEXT,
        "password_env": ENV_NAME,
        "password_file": PATH,
        "password": SECRET,
        "tables": text_list('"schema.table" names', '["public.orders"]', "leave tables out to capture every table"),
        "key_columns": KEY_COLUMNS,
        # each database's own keys (its descriptor: sources/<db>/descriptor.py)
        **{key: kind for d in descriptors() for key, kind in d.config_keys.items()},
        "watermark_schema": TEXT,
        # "table": watermark rows (the default); "log": read-only dumps (docs/sources.md)
        "watermarks": choice("table", "log"),
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
