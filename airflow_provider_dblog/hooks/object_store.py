"""The Delta changelog on S3 from an Airflow ``aws`` connection (the connection type of
``apache-airflow-providers-amazon``: login = access key id, password = secret access key,
extras ``region_name``, ``endpoint_url`` (or ``service_config.s3.endpoint_url``),
``aws_session_token``, ``profile_name``), whose extra ``url`` names the lake
(``s3://bucket/prefix``).

Only the connection is read (Airflow's Connection API): the Amazon provider need not be
installed. The settings become the ``AWS_*`` variables delta-rs and obstore read: the capture
child gets them in its environment, an output built in this process as storage options,
never in argv, the config file, XCom or a trigger's serialized arguments.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ConfigurationError
from ..outputs.object_store import is_remote

AWS_CONN_TYPE = "aws"
# Extras of the Amazon provider that ask for an authentication delta-rs cannot be given
# through its settings here: refused, not ignored (a silently different identity).
_UNSUPPORTED = ("role_arn", "assume_role_method", "assume_role_kwargs", "external_id")


def aws_settings(conn_id: str, conn: Any) -> dict[str, str]:
    """The ``AWS_*`` settings of an ``aws`` connection (secrets included: pass them only by
    environment or in memory)."""
    extra = dict(conn.extra_dejson or {})
    unsupported = [k for k in _UNSUPPORTED if extra.get(k)]
    if unsupported:
        raise ConfigurationError(
            f"connection {conn_id} asks for {', '.join(unsupported)}: DBLog's changelog writer (delta-rs) "
            "cannot assume a role from an Airflow connection.",
            "give the connection the role's keys (login / password, aws_session_token), or leave it without "
            "keys so the default chain (instance profile, web identity, AWS_* variables) is used.",
        )
    out: dict[str, str] = {}
    if conn.login:
        out["AWS_ACCESS_KEY_ID"] = str(conn.login)
    if conn.password:
        out["AWS_SECRET_ACCESS_KEY"] = str(conn.password)
    if bool(conn.login) != bool(conn.password):
        raise ConfigurationError(
            f"connection {conn_id} has only one of the access key id (login) and the secret (password).",
            "set both, or neither to use the default credential chain.",
        )
    if extra.get("aws_session_token"):
        out["AWS_SESSION_TOKEN"] = str(extra["aws_session_token"])
    if extra.get("region_name"):
        out["AWS_REGION"] = str(extra["region_name"])
    if extra.get("profile_name"):
        out["AWS_PROFILE"] = str(extra["profile_name"])
    s3_service = (extra.get("service_config") or {}).get("s3") or {}
    endpoint = s3_service.get("endpoint_url") or extra.get("endpoint_url")
    if endpoint:
        out["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).lower().startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"  # an S3-compatible store without TLS, on its own network
    return out


def aws_output_url(conn_id: str, conn: Any) -> str:
    """The lake URL in the connection's extra ``url``: an object-store URL."""
    url = str((conn.extra_dejson or {}).get("url") or "").strip()
    if not url:
        raise ConfigurationError(
            f"connection {conn_id} (type aws) names no changelog.",
            'set its extra "url" to the lake, e.g. {"url": "s3://bucket/lake", "region_name": "eu-west-1"}.',
        )
    if not is_remote(url):
        raise ConfigurationError(
            f"connection {conn_id} (type aws) names {url!r}, which is not an object-store URL.",
            "use s3://bucket/prefix; a local lake needs no aws connection.",
        )
    return url
