"""Hand each batch to a user function: ``fn(events)``; the batch is durable when it returns.

Only this process remembers what was delivered (``last_position`` starts empty), so after a
restart the engine resends from its checkpoint, and a crash between ``fn`` returning and the
checkpoint resends that batch too: **the function must itself be idempotent across
restarts** (e.g. upsert by ``(source_id, position)``), or tolerate duplicates.
"""

from __future__ import annotations

import importlib
from typing import Callable, Optional, Sequence, Union

from ..core.errors import ConfigurationError
from ..core.events import ChangeEvent, Position, TableSchema
from ._common import Bookkeeping

BatchFn = Callable[[list], object]


def load_callable(path: str) -> Callable:
    """Resolve ``"package.module:function"`` (attribute paths like ``mod:obj.method`` too)."""
    fix = "give the function as 'package.module:function', importable by the capture process."
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{path!r} is not a 'module:function' path.", fix)
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import module {module_name!r}: {exc}", fix) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(f"module {module_name!r} has no attribute {attr!r}.", fix) from None
    if not callable(target):
        raise ConfigurationError(f"{path!r} is not callable.", fix)
    return target


class CallableOutput:
    """``Output`` that calls ``fn(events)`` per batch, and ``schema_fn(schema)`` if given."""

    def __init__(self, fn: Union[BatchFn, str], schema_fn: Union[Callable, str, None] = None):
        self.fn = load_callable(fn) if isinstance(fn, str) else fn
        self.schema_fn = load_callable(schema_fn) if isinstance(schema_fn, str) else schema_fn
        if not callable(self.fn):
            raise ConfigurationError(f"{fn!r} is not callable.", "pass a function taking a list of ChangeEvents.")
        self._book = Bookkeeping()
        self.schemas: dict[str, TableSchema] = {}

    def __repr__(self) -> str:
        return f"CallableOutput({getattr(self.fn, '__qualname__', self.fn)!r})"

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def register_schemas(self, schemas: Sequence[TableSchema]) -> None:
        for schema in schemas:
            self.register_schema(schema)

    def register_schema(self, schema: TableSchema) -> None:
        sid = schema.schema_id()
        if sid in self.schemas:
            return
        if self.schema_fn is not None:
            self.schema_fn(schema)
        self.schemas[sid] = schema

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        self._book.check_epoch(self._book.source_ids(events), epoch)
        fresh = self._book.fresh(events)
        if not fresh:
            return
        nxt = self._book.advanced(fresh, epoch)
        self.fn(list(fresh))  # a plain list of ChangeEvents, whatever the writer batched
        self._book.adopt(nxt)

    def last_position(self, source_id: str) -> Optional[Position]:
        return self._book.positions.get(source_id)
