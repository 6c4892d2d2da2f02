"""What a config key's value must be (``Kind``) and the kinds the keys share: the part of
config_keys.py that the sources' descriptors (sources/*/descriptor.py) use to declare their
own ``[source]`` keys, with no import of the package (config_keys.py imports the sources)."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable


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
