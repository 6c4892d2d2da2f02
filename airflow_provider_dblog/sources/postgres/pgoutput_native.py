"""Row changes of pgoutput messages decoded by the compiled extension (native/src/pgoutput.rs).

The Python decoder (pgoutput.py, then ``LogDecoder._pg_row`` with postgres_values'
converters) stays the reference and takes every message this one hands back: a relation
whose plan cannot be made, and any message the extension says it does not reproduce exactly
(an unchanged-TOAST column, a timestamp in another form than the UTC ISO one, ...). The
kinds of values come from ``postgres_values.pg_kind``, the one classification both paths use.
``DBLOG_NATIVE_ROWS=0`` turns it off, like the binlog rows decoder.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from ..native import LogOnce, enabled, extension
from .pgoutput import Relation
from .values import PG_KINDS, pg_kind

log = logging.getLogger(__name__)


class NativePgRows:
    """One plan per Relation message; ``change`` gives (tag, before, after) of an
    Insert/Update/Delete message, or None: decode it in Python."""

    def __init__(self, type_name: Optional[Callable[[int], str]] = None):
        self._type_name = type_name  # type OID -> its name (for plan())
        self._plans: dict[int, tuple[Relation, Any]] = {}
        self._once = LogOnce(log)
        self._chunk_plans: dict[tuple, Any] = {}
        self.on = enabled()

    def plan(self, rel: Relation) -> Any:
        cached = self._plans.get(rel.relid)
        if cached is not None and cached[0] is rel:
            return cached[1]
        assert self._type_name is not None, "a decoder of changes needs the type names"
        kinds = [PG_KINDS.index(pg_kind(self._type_name(c.type_oid))) for c in rel.columns]
        plan = extension.PgRowPlan([c.name for c in rel.columns], kinds, [c.is_key for c in rel.columns])
        self._plans[rel.relid] = (rel, plan)
        return plan

    def chunk_rows(self, names: list[str], kinds: list[str], convert: list[bool], raw: list) -> Optional[list]:
        """A chunk SELECT's rows as canonical dicts (``kinds``: each column's pg_kind,
        ``convert``: which columns' text still needs its kind's conversion), or None: convert
        them in Python (a value the extension hands back, such as an 'infinity' timestamp)."""
        try:
            return self.chunk_plan(names, kinds).rows(raw, convert)
        except extension.Unsupported as exc:
            self._once(f"chunk: {exc}", "a chunk's rows are converted in Python: %s (logged once)", exc)
            return None

    def chunk_plan(self, names: list[str], kinds: list[str]) -> Any:
        """The plan of a chunk's columns (``kinds``: each one's pg_kind), cached."""
        key = (tuple(names), tuple(kinds))
        plan = self._chunk_plans.get(key)
        if plan is None:
            plan = extension.PgRowPlan(names, [PG_KINDS.index(k) for k in kinds], [False] * len(names))
            self._chunk_plans[key] = plan
        return plan

    def change_text(self, rel: Relation, payload: bytes, key: list[int]) -> Optional[tuple]:
        """(tag, before_key, after_key, before, after) of an Insert/Update/Delete message, the
        images as their changelog JSON text (core/row_text.py), the keys as tuples of the
        columns at ``key``; or None: ``change`` gives it as dicts (a value only Python writes
        exactly, an unchanged-TOAST column, ...; logged once per reason)."""
        try:
            return self.plan(rel).change_text(payload, key)
        except extension.Unsupported as exc:
            reason = f"{rel.qualified_name}: {exc}"
            self._once("text " + reason, "a change of %s is decoded into dicts (logged once)", reason)
            return None

    def run_text(self, rel: Relation, payloads: list[bytes], start: int, key: list[int]) -> Optional[tuple]:
        """``change_text`` for the run of changes of ``rel`` with one tag from
        ``payloads[start]`` on, in one call: (n, tag, keys, befores, afters) of the first n
        messages; or None: decode ``payloads[start]`` alone (the run stops before any message
        ``change_text`` would not give, which is then decoded alone)."""
        try:
            return self.plan(rel).run_text(payloads, start, key)
        except extension.Unsupported:
            return None  # change_text says why, logged once

    def change(self, rel: Relation, payload: bytes) -> Optional[tuple]:
        try:
            return self.plan(rel).change(payload)
        except extension.Unsupported as exc:
            reason = f"{rel.qualified_name}: {exc}"
            self._once(reason, "a change of %s is decoded in Python (logged once)", reason)
            return None
