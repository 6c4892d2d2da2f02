"""Outputs: where the ordered change stream goes (protocol in core/protocols.py).

``make_output(url)`` turns the output URL of the CLI / config file into an output:

=====================================  ===============================================
``delta:///abs/path``, ``delta://rel``   Delta changelog (the default), local path
``s3://…``, ``gs://…``, ``az://…`` …     Delta changelog on an object store
a bare path (``/data/lake``, ``lake``)   Delta changelog
``jsonl:///abs/path``, ``jsonl://rel``   JSON lines files in that directory
``python:package.module:function``       ``fn(events)`` per batch (see callable.py)
``kafka://host:port[,...][?options]``    Kafka topics, exactly once (kafka.py, docs/kafka.md)
=====================================  ===============================================
"""

from __future__ import annotations

import re
from typing import Optional

from ..core.errors import ConfigurationError, without_userinfo
from ._urls import _ACCEPTED, refuse_credentials
from .object_store import REMOTE_SCHEMES

__all__ = ["make_output", "DeltaChangelogOutput", "JsonLinesOutput", "CallableOutput", "KafkaOutput"]

# URI schemes delta-rs opens directly: the object stores (outputs/object_store.py) and these.
_OBJECT_STORE_SCHEMES = REMOTE_SCHEMES | {"file", "lakefs", "hdfs"}


def make_output(url: str, storage_options: Optional[dict] = None):
    """Build the output a URL names (see the module docstring for the accepted forms)."""
    url = (url or "").strip()
    if not url:
        raise ConfigurationError("no output URL was given.", _ACCEPTED)
    refuse_credentials(url)
    if url.startswith("python:"):
        from .callable import CallableOutput

        return CallableOutput(url[len("python:") :])
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://(.*)$", url)
    if m is None:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", url) and not re.match(r"^[A-Za-z]:[\\/]", url):
            raise ConfigurationError(f"unknown output URL {without_userinfo(url)!r}.", _ACCEPTED)
        from .delta import DeltaChangelogOutput

        return DeltaChangelogOutput(url, storage_options)  # a bare path
    scheme, rest = m.group(1).lower(), m.group(2)
    if not rest:
        raise ConfigurationError(f"the output URL {without_userinfo(url)!r} names no location.", _ACCEPTED)
    if scheme == "delta":
        from .delta import DeltaChangelogOutput

        return DeltaChangelogOutput(rest, storage_options)
    if scheme == "jsonl":
        from .jsonl import JsonLinesOutput

        return JsonLinesOutput(rest)
    if scheme == "kafka":
        from .kafka import KafkaOutput, parse_url

        return KafkaOutput(*parse_url(rest))
    if scheme in _OBJECT_STORE_SCHEMES:
        from .delta import DeltaChangelogOutput

        return DeltaChangelogOutput(url, storage_options)
    raise ConfigurationError(f"unknown output URL scheme {scheme!r} in {without_userinfo(url)!r}.", _ACCEPTED)


def __getattr__(name: str):
    # Lazy so that importing the package does not import pyarrow/deltalake.
    if name == "DeltaChangelogOutput":
        from .delta import DeltaChangelogOutput

        return DeltaChangelogOutput
    if name == "JsonLinesOutput":
        from .jsonl import JsonLinesOutput

        return JsonLinesOutput
    if name == "CallableOutput":
        from .callable import CallableOutput

        return CallableOutput
    if name == "KafkaOutput":
        from .kafka import KafkaOutput

        return KafkaOutput
    raise AttributeError(name)
