"""Where a DBLog task finds its source, state store and changelog, as one value.

The operators take these as their (templated) constructor arguments, the triggers as their
serialized kwargs; both build the hook from this value instead of passing six arguments
along. Plain strings only: a trigger's kwargs are stored by Airflow as JSON, and no
password is ever among them (invariant 8).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from .dblog import DBLogHook


@dataclasses.dataclass(frozen=True)
class DBLogConnections:
    """``DBLogHook``'s arguments (see there); ``output`` is the operators' ``changelog``."""

    source_conn_id: Optional[str] = None
    state_conn_id: Optional[str] = None
    state: Optional[str] = None
    output: Optional[str] = None
    output_conn_id: Optional[str] = None
    source_id: Optional[str] = None

    @classmethod
    def of_operator(cls, op: Any) -> "DBLogConnections":
        """An operator's rendered arguments (templated, so kept as its own attributes; its
        ``changelog`` is the output: ``BaseOperator.output`` is the XComArg). An operator
        without a changelog argument (the dump) has none."""
        return cls(
            op.source_conn_id,
            op.state_conn_id,
            op.state,
            getattr(op, "changelog", None),
            getattr(op, "changelog_conn_id", None),
            op.source_id,
        )

    def hook(self) -> DBLogHook:
        return DBLogHook(
            self.source_conn_id,
            self.state_conn_id,
            state=self.state,
            output=self.output,
            output_conn_id=self.output_conn_id,
            source_id=self.source_id,
        )

    def kwargs(self, *names: str) -> dict[str, Any]:
        """As a trigger's kwargs: the named fields (a trigger that needs only the state store
        serializes only those), or all of them."""
        every = dataclasses.asdict(self)
        return {name: every[name] for name in names} if names else every


STATE_ONLY = ("state_conn_id", "state")
