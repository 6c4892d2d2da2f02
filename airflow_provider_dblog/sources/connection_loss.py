"""Turning a driver's "connection lost" into the engine's ``SourceUnavailable``.

Each source knows which of its driver's errors a reconnect can cure (``lost(exc)``); the
engine knows only ``SourceUnavailable``. Public source methods that talk to the server are
wrapped with ``on_connection_loss`` so that the translation happens once, at the boundary,
and the rest of each source raises its driver's errors as they are.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol, TypeVar

from ..core.errors import DBLogError, SourceUnavailable


class _ClassifiesLoss(Protocol):
    source_id: str

    def lost(self, exc: BaseException) -> bool: ...


F = TypeVar("F", bound=Callable[..., Any])


def on_connection_loss(method: F) -> F:
    """Raise SourceUnavailable (from the driver error) when ``self.lost(exc)`` says so; every
    other error, including DBLog's own user-facing ones, passes through unchanged."""

    @functools.wraps(method)
    def wrapper(self: _ClassifiesLoss, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except DBLogError:
            raise  # already says what it is (SourceUnavailable included)
        except Exception as exc:
            if not self.lost(exc):
                raise
            raise SourceUnavailable(
                f"lost the connection to source {self.source_id} ({type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else 'no message'})."
            ) from exc

    return wrapper  # type: ignore[return-value]
