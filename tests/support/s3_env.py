"""The test object store (``scripts/services up s3``): its settings as the environment
variables delta-rs, obstore and the capture children read, and a fresh lake URL per test."""

from __future__ import annotations

import os
import uuid

import pytest

_NEEDED = ("DBLOG_S3_ENDPOINT", "DBLOG_S3_BUCKET", "DBLOG_S3_ACCESS_KEY_ID", "DBLOG_S3_SECRET_ACCESS_KEY")


def aws_env() -> dict[str, str]:
    """AWS_* variables for the test store (skips the test when the store is not configured)."""
    missing = [k for k in _NEEDED if not os.environ.get(k)]
    if missing:
        pytest.skip(f'{", ".join(missing)} unset: `scripts/services up s3` and `eval "$(scripts/services env)"`')
    return {
        "AWS_ENDPOINT_URL": os.environ["DBLOG_S3_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": os.environ["DBLOG_S3_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["DBLOG_S3_SECRET_ACCESS_KEY"],
        "AWS_REGION": os.environ.get("DBLOG_S3_REGION", "us-east-1"),
        "AWS_ALLOW_HTTP": "true",  # the test store speaks plain http on loopback
    }


def use_s3(monkeypatch) -> str:
    """Put the test store's settings into this process's environment (children inherit it)
    and return a lake URL no other test uses."""
    for key, value in aws_env().items():
        monkeypatch.setenv(key, value)
    return f"s3://{os.environ['DBLOG_S3_BUCKET']}/{uuid.uuid4().hex[:12]}/lake"
