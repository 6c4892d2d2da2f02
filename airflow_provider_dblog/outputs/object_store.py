"""The Delta changelog on an object store: commits are safe only by put-if-absent.

Leader fencing (docs/state.md, invariant 7) rests on the changelog's commit being atomic:
two writers racing for version N must not both succeed. On a local disk delta-rs gets that
from a rename without replace; on S3 and S3-compatible stores it writes the commit file with
``If-None-Match: *`` (conditional writes; delta-rs 1.x always asks for them), GCS and Azure
have their own preconditions. A store that ignores the header (an older S3-compatible
server, a proxy that strips it) accepts the second writer's PUT and silently replaces the
first commit: a deposed leader could overwrite its successor's events. So at open, once per
process and location, ``require_put_if_absent`` writes a probe object twice with the
create-only mode and refuses the store if the second write is not refused. Settings that
ask delta-rs for unsafe commits (``AWS_S3_ALLOW_UNSAFE_RENAME``) or for a lock that it no
longer has (``AWS_S3_LOCKING_PROVIDER``) are refused before that, naming the setting.

The probe goes through ``obstore`` (the Python binding of the same Rust ``object_store``
crate delta-rs uses), configured from the same storage options and environment variables.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Any, Mapping, Optional

from ..core.errors import ConfigurationError, without_userinfo

# Schemes whose commits go through an object store (not a local rename).
REMOTE_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "azure"})
# delta-rs settings that would weaken or replace the put-if-absent commit.
_UNSAFE = {
    "aws_s3_allow_unsafe_rename": "asks delta-rs to commit without put-if-absent (two writers may overwrite each other)",
    "aws_s3_locking_provider": "names a commit lock (DynamoDB) that delta-rs 1.x no longer has",
}
_TRUE = {"1", "true", "yes", "on"}
# Client options of object_store, given to obstore apart from the store's own config.
_CLIENT_KEYS = {"allow_http", "aws_allow_http", "allow_invalid_certificates", "timeout", "connect_timeout"}

log = logging.getLogger(__name__)
_probed: set[tuple[str, tuple]] = set()
_lock = threading.Lock()


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def is_remote(url: str) -> bool:
    return scheme_of(url) in REMOTE_SCHEMES


def refuse_unsafe_settings(
    storage_options: Optional[Mapping[str, str]], environ: Mapping[str, str] = os.environ
) -> None:
    """ConfigurationError naming the setting if the storage options or the environment ask
    for commits that are not put-if-absent."""
    given = {str(k).lower(): (str(v), f"storage option {k}") for k, v in (storage_options or {}).items()}
    for k, v in environ.items():
        given.setdefault(k.lower(), (v, f"environment variable {k}"))
    for key, why in _UNSAFE.items():
        if key not in given:
            continue
        value, where = given[key]
        if key == "aws_s3_allow_unsafe_rename" and value.strip().lower() not in _TRUE:
            continue
        raise ConfigurationError(
            f"the {where} is set ({value!r}): it {why}; DBLog's leader fencing needs every changelog "
            "commit to be put-if-absent.",
            f"unset {where.split()[-1]}: delta-rs commits to S3 with conditional writes (If-None-Match), "
            "which AWS S3 and current S3-compatible stores support (docs/deploy.md).",
        )


def _obstore_options(root: str, storage_options: Optional[Mapping[str, str]]) -> tuple[dict, dict]:
    """(store config, client options) for obstore from delta-rs storage options; keys
    obstore does not know (delta-rs' own) are left out, the environment fills the rest."""
    from obstore.exceptions import BaseError, UnknownConfigurationKeyError
    from obstore.store import from_url

    config: dict[str, str] = {}
    client: dict[str, str] = {}
    for key, value in (storage_options or {}).items():
        lk = str(key).lower()
        if lk in _CLIENT_KEYS:
            client["allow_http" if lk == "aws_allow_http" else lk] = str(value)
            continue
        one: Any = {lk: str(value)}  # a config dict's type depends on the store kind
        try:
            from_url(root, config=one)
        except UnknownConfigurationKeyError:
            continue  # delta-rs' own setting
        except BaseError:
            pass  # a known key, with a value for the store itself to judge
        config[lk] = str(value)
    return config, client


def require_put_if_absent(root: str, storage_options: Optional[Mapping[str, str]] = None) -> None:
    """Refuse ``root`` (an object-store URL) unless its store refuses a second create-only
    write of the same object. One probe per process, location and options."""
    refuse_unsafe_settings(storage_options)
    marker = (root, tuple(sorted((storage_options or {}).items())))
    with _lock:
        if marker in _probed:
            return
    try:
        import obstore
        from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError
        from obstore.store import from_url
    except ImportError as exc:  # pragma: no cover - obstore is a dependency
        raise ConfigurationError(
            f"checking that {without_userinfo(root)} refuses a second put-if-absent needs obstore ({exc}).",
            "pip install 'obstore>=0.12,<1' (a dependency of airflow-provider-dblog).",
        ) from exc
    config, client = _obstore_options(root, storage_options)
    options: Any = {"config": config or None, "client_options": client or None}  # typed per store kind
    path = f"_dblog/put-if-absent-probe/{uuid.uuid4().hex}"
    where = without_userinfo(root)
    try:
        store = from_url(root, **options)
        obstore.put(store, path, b"first", mode="create")
    except Exception as exc:
        raise ConfigurationError(
            f"cannot write to the object store at {where}: {type(exc).__name__}: {str(exc).splitlines()[0]}",
            "check the URL (the bucket must exist), the credentials and the endpoint (AWS_ENDPOINT_URL, "
            "AWS_REGION, AWS_ALLOW_HTTP for http://) in the environment or the output connection (docs/deploy.md).",
        ) from exc
    try:
        try:
            obstore.put(store, path, b"second", mode="create")
        except (AlreadyExistsError, PreconditionError):
            pass  # refused: what every commit relies on
        else:
            raise ConfigurationError(
                f"the object store at {where} accepted a second put-if-absent of the same object: it ignores "
                "conditional writes (If-None-Match), so two writers could overwrite each other's changelog commit "
                "and a deposed leader could replace its successor's events.",
                "use a store with conditional writes (AWS S3, Cloudflare R2, a current MinIO or Ceph RGW, GCS, "
                "Azure Blob), and no proxy in between that drops the If-None-Match header (docs/deploy.md).",
            )
    finally:
        try:
            obstore.delete(store, path)
        except BaseError as exc:  # a store that lets us write but not delete: the probe stays, harmless
            log.info("left the probe object %s/%s (%s)", where, path, type(exc).__name__)
    with _lock:
        _probed.add(marker)


def list_dirs(url: str, storage_options: Optional[Mapping[str, str]] = None) -> list[str]:
    """The names of the directories directly under ``url`` (a local path or an object-store
    URL; one LIST request there), sorted; none if ``url`` does not exist."""
    if not is_remote(url):
        path = url[len("file://") :] if url.startswith("file://") else url
        return sorted(e.name for e in os.scandir(path) if e.is_dir()) if os.path.isdir(path) else []
    import obstore
    from obstore.store import from_url

    config, client = _obstore_options(url, storage_options)
    options: Any = {"config": config or None, "client_options": client or None}
    found = obstore.list_with_delimiter(from_url(url.rstrip("/") + "/", **options))
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in found["common_prefixes"])
