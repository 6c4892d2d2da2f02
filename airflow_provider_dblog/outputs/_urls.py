"""What the output URLs accept, and the refusal of credentials in them: shared by
``make_output`` and the outputs that check their own URL, so neither imports the other."""

from __future__ import annotations

from ..core.errors import ConfigurationError, has_userinfo, without_userinfo

_ACCEPTED = (
    "use one of: 'delta:///absolute/path' or 'delta://relative/path' (Delta changelog), "
    "an object-store URI such as 's3://bucket/prefix' (Delta changelog), a bare path "
    "(Delta changelog), 'jsonl:///absolute/dir' (JSON lines), or "
    "'python:package.module:function' (a function called with each batch), or "
    "'kafka://host:port?topic_prefix=...' (Kafka topics)."
)


def refuse_credentials(url: str) -> None:
    """ConfigurationError, without repeating them, if ``url`` carries ``user:password@``.
    Whatever the scheme (a mistyped one too): such a URL is never taken for a local path,
    which would make the password a directory name and put it into the Delta log."""
    if has_userinfo(url):
        raise ConfigurationError(
            f"the output URL {without_userinfo(url)!r} carries credentials (user:password@ before the host); "
            "a URL is shown in process lists, logs and Airflow's UI.",
            "remove them from the URL: Kafka client settings (SASL) go into the JSON object in "
            "$DBLOG_KAFKA_CONFIG (docs/kafka.md), an object store's keys into its usual environment "
            "variables or storage options.",
        )
