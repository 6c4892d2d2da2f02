"""PostgreSQL server errors with a known cause, as errors that name the cause and the fix.

DESIGN invariant 8 (docs/design.md): a bad configuration stops with the setting or command to change.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Callable, Optional

import psycopg2

from ...core.errors import ConfigurationError, PositionLostError
from .catalog import quote_ident, quote_table
from .server_setup import plugin_not_allowed_error

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ErrorContext:
    """The source's settings that an error message names, and a way to read a server setting
    (the source builds it: no reaching into the source's fields from here)."""

    slot_name: str
    user: str
    publication: str
    plugin: str
    watermark_schema: str
    watermark_table: str
    tables: tuple[str, ...]
    server_setting: Callable[[str], Optional[str]]


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "pgerror", None) or exc).strip()
    text = re.sub(r"^(ERROR|FATAL):\s+", "", text)
    return text.splitlines()[0] if text else type(exc).__name__


def translate(exc: BaseException, src: ErrorContext) -> BaseException:
    """A server error that has a known cause and fix, as a ConfigurationError; others as is."""
    msg = first_line(exc)
    low = msg.lower()
    slot, user, pub = src.slot_name, src.user, quote_ident(src.publication)
    if "output_plugin_libraries" in low or ("output plugin" in low and "not allowed" in low):
        setting = None
        try:
            setting = src.server_setting("output_plugin_libraries")
        except psycopg2.Error as unreadable:  # the message is still right, only less precise
            log.debug("could not read output_plugin_libraries: %s", unreadable)
        err = plugin_not_allowed_error(src.plugin, setting)
        return ConfigurationError(f"{err.cause} (server: {msg})", err.fix)
    if "could not access file" in low and src.plugin in low:
        return ConfigurationError(
            f"the output plugin {src.plugin} is not installed on the server ({msg}).",
            "install it on the database server (Debian/Ubuntu: apt-get install "
            "postgresql-<major version>-wal2json) or use plugin='pgoutput', which is built in.",
        )
    if "is active for pid" in low or ("replication slot" in low and "in use" in low):
        return ConfigurationError(
            f"replication slot {slot} is in use by another process ({msg}).",
            "stop the other capture of this source (a slot has one reader), or pass another slot_name.",
        )
    if "all replication slots are in use" in low or "number of requested standby connections" in low:
        return ConfigurationError(
            f"the server has no free replication slot or WAL sender ({msg}).",
            "raise max_replication_slots / max_wal_senders (ALTER SYSTEM SET ...; restart) or "
            "drop unused slots (SELECT pg_drop_replication_slot(name) FROM pg_replication_slots WHERE NOT active).",
        )
    if (
        "must be superuser or replication role" in low
        or "permission denied to start wal sender" in low
        or "must be superuser or have replication" in low
    ):
        return ConfigurationError(
            f"role {user} may not use replication ({msg}).",
            f"run ALTER ROLE {quote_ident(user)} REPLICATION; (as a superuser).",
        )
    if "publication" in low and "does not exist" in low:
        return ConfigurationError(
            f"publication {src.publication} does not exist as of the changes being decoded ({msg}).",
            f"create it (CREATE PUBLICATION {pub} FOR TABLE ...), and note that a slot only sees "
            "changes made after its publication existed: drop and recreate the slot, then run a full dump.",
        )
    if "must be owner of" in low:
        return ConfigurationError(
            f"role {user} cannot add the captured tables to publication {src.publication} ({msg}).",
            f"have the tables' owner or a superuser run CREATE PUBLICATION {pub} FOR TABLE "
            f"{', '.join(quote_table(t) for t in [*src.tables, src.watermark_table])};",
        )
    if "permission denied" in low:
        return ConfigurationError(
            f"role {user} lacks a privilege DBLog needs ({msg}).",
            f"grant it SELECT on the captured tables, USAGE on their schemas and CREATE on the "
            f"database (for schema {src.watermark_schema}), or create "
            f"{src.watermark_table} for it beforehand.",
        )
    if "requested wal segment" in low and "removed" in low:
        return PositionLostError(f"the server removed WAL the replication slot still needs ({msg}).")
    return exc
