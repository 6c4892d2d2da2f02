"""The compiled extension (``native/``) as the decoders that use it see it: whether it was
built and is switched on (``DBLOG_NATIVE_ROWS=0`` turns it off), and a log that names each
reason for handing work back to the Python path once."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

extension: Any
try:
    from .. import _rows_native as extension  # type: ignore[attr-defined, no-redef]

    IMPORT_ERROR: Optional[str] = None
except ImportError as exc:  # the pure-Python wheel (DBLOG_PURE_PYTHON=1), or an unsupported platform
    extension = None
    IMPORT_ERROR = str(exc)
    # Once per process, where every decoder imports this module: a user who installed the
    # pure wheel by accident (no manylinux wheel for the platform) must be able to tell.
    logging.getLogger(__name__).warning(
        "airflow-provider-dblog runs without its compiled decoder (%s): rows are decoded in Python, "
        "several times slower. Fix: install the manylinux wheel, or build from source with a Rust "
        "toolchain (docs/install.md).",
        IMPORT_ERROR,
    )


def compiled() -> bool:
    """Whether this installation carries the compiled decoder (``dblog doctor`` reports it)."""
    return extension is not None


def enabled() -> bool:
    return extension is not None and os.environ.get("DBLOG_NATIVE_ROWS", "1") != "0"


class LogOnce:
    """``log.info`` the first time each key is seen (every row could repeat the reason)."""

    def __init__(self, log: logging.Logger):
        self._log = log
        self._seen: set[str] = set()

    def __call__(self, key: str, message: str, *args: Any) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self._log.info(message, *args)
