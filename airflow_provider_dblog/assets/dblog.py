"""The ``dblog://`` asset URIs: the changelog of a lake and its mirror tables as Airflow assets.

Registered in ``get_provider_info`` (``asset-uris``) as Airflow's own providers register
theirs: Airflow calls ``sanitize_uri`` on every ``Asset("dblog://...")`` (a bad URI stops the
DAG file with the cause and the fix), OpenLineage's listener calls
``convert_asset_to_openlineage`` for assets in a task's inlets and outlets, and hook lineage
builds assets with ``create_asset``.

==========================================================  =========================================
URI                                                         the dataset
==========================================================  =========================================
``dblog://changelog/<lake>``                                the changelog of the lake at <lake>: its
                                                            tables, one per source
``dblog://commits/<lake>``                                  the same tables' new commits (the asset
                                                            ``dblog_land``'s changelog watcher fires)
``dblog://mirror/<mirrors>/<source_id>/<schema>.<table>``   one Delta mirror table
==========================================================  =========================================

``<lake>`` is the lake root as the capture's changelog URL and ``dblog_land``'s ``--lake`` name
it: an absolute path (``dblog://changelog/opt/dblog/lake``) or an object-store URL
(``dblog://changelog/s3://bucket/dblog``); ``<mirrors>`` is the mirrors' root (default
``<lake>/mirrors``). Why a scheme of our own rather than ``file://`` / ``s3://`` assets: those
schemes belong to other providers (common-io, amazon; none has ``s3a``, and the Google and
Azure ones are not dependencies), whose converters name datasets by their own rule, and a
changelog and a mirror are both Delta directories that only the kind tells apart. Here the
OpenLineage dataset is lineage.py's, by construction (``lineage.location`` of the same path),
so an asset in a task's inlets joins the graph the operators report: source tables → changelog
(``<lake>/changelogs``, the directory above each source's table) → mirrors.

Each dataset is one asset whose name is its URI (``dblog_asset``): Airflow keeps one active asset per
name and per URI, and drops the events of an outlet left inactive by a clash. The example DAGs
also emit the name-only ``dblog_changelog`` of earlier builds (``changelog_outlets``).

Kept free of Airflow imports at module level: Airflow imports the handler while it builds an
``Asset``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import SplitResult, urlsplit

from ..core.errors import ConfigurationError, RequestError
from ..core.names import canonical
from ..outputs.lake_layout import absolute, changelog_path, changelogs_root, mirror_path, mirrors_root
from ..outputs.object_store import REMOTE_SCHEMES

if TYPE_CHECKING:
    from airflow.sdk import Asset

SCHEME = "dblog"
CHANGELOG, COMMITS, MIRROR = "changelog", "commits", "mirror"
KINDS = (CHANGELOG, COMMITS, MIRROR)
# Where a lake may be: delta-rs's object stores and file systems (outputs/__init__.py).
_STORES = REMOTE_SCHEMES | {"hdfs", "lakefs"}
# Azure's URLs name the container before the '@' (abfss://container@account...): not a user.
_CONTAINER_AT = {"abfs", "abfss", "wasb", "wasbs"}
_NESTED = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_FORMS = (
    "dblog://changelog/<lake> (dblog://changelog/opt/dblog/lake, dblog://changelog/s3://bucket/dblog), "
    "dblog://commits/<lake>, or dblog://mirror/<mirrors root>/<source id>/<schema>.<table> "
    "(dblog://mirror/opt/dblog/lake/mirrors/shop/shop.orders)"
)


class AssetURIError(ConfigurationError, ValueError):
    """A ``dblog://`` URI that names no DBLog dataset. A ValueError, as Airflow expects of a
    URI handler (``Asset.normalized_uri`` reads one as "no normal form")."""


@dataclass(frozen=True)
class DBLogAssetURI:
    """A parsed ``dblog://`` URI. ``location``: the lake root (changelog, commits) or the
    mirror's directory (mirror), an absolute path or an object-store URL, normalised."""

    kind: str
    location: str

    @property
    def uri(self) -> str:
        # a local path keeps its leading slash as the URI's path; a URL follows one slash
        return f"{SCHEME}://{self.kind}{self.location if self.location.startswith('/') else '/' + self.location}"

    @property
    def path(self) -> str:
        """The mirror's Delta table, or the lake's changelog: the directory of its tables, one
        per source (``<lake>/changelogs``; each source's table is a dataset below it), or the
        one table of a lake written before (``<lake>/changelog``), as the capture names it."""
        if self.kind == MIRROR:
            return self.location
        return changelog_path(self.location) if _written_before(self.location) else changelogs_root(self.location)

    def dataset(self) -> tuple[str, str]:
        """(namespace, name) of the OpenLineage dataset: lineage.py's for the same table."""
        from ..lineage import location

        return location(self.path)


def _written_before(lake: str) -> bool:
    """outputs/delta.py ``written_before``, with the keys of this process's environment (as
    the capture's own lineage asks); a store that cannot be asked names the lake by the
    layout of today, with a warning."""
    from ..outputs.delta import written_before

    try:
        return written_before(lake)
    except Exception as exc:  # noqa: BLE001 - naming a dataset never fails a task
        import logging

        logging.getLogger(__name__).warning(
            "cannot tell the layout of the lake %s (%s: %s): its changelog dataset is named %s/%s. "
            "Fix: give this process the store's keys in its environment.",
            lake,
            type(exc).__name__,
            str(exc)[:200],
            lake,
            "changelogs",
        )
        return False


def changelog_uri(lake: str) -> str:
    """``dblog://changelog/<lake>`` (``lake``: a root as ``--lake`` takes it, or ``delta://...``)."""
    return _uri(CHANGELOG, lake)


def commits_uri(lake: str) -> str:
    return _uri(COMMITS, lake)


def mirror_uri(source_id: str, table: str, *, lake: Optional[str] = None, mirrors: Optional[str] = None) -> str:
    """The mirror of ``table`` of ``source_id`` under ``mirrors`` (default ``<lake>/mirrors``)."""
    if not (lake or mirrors):
        raise AssetURIError("a mirror's asset needs its lake or its mirrors root.", "pass lake= or mirrors=.")
    return _uri(MIRROR, mirror_path(mirrors_root(lake or "", mirrors), source_id, table))


def _uri(kind: str, location: str) -> str:
    # absolute(): delta:// dropped, a local path made absolute (as the capture and the landing do)
    return parse_uri(f"{SCHEME}://{kind}/{absolute(location.strip())}").uri


def parse_uri(uri: str) -> DBLogAssetURI:
    """The kind and normalised location of a ``dblog://`` URI; AssetURIError naming the fault
    and the forms otherwise."""
    parts = urlsplit(uri.strip())
    if parts.scheme.lower() != SCHEME:
        raise AssetURIError(f"{_shown(uri)} is not a {SCHEME}:// URI.", f"write one of {_FORMS}.")
    kind = parts.netloc.lower()
    if kind not in KINDS:
        what = f"has the kind {parts.netloc!r}" if parts.netloc else "names no kind"
        raise AssetURIError(
            f"asset URI {_shown(uri)} {what}; a dblog:// URI names a changelog, its commits or a mirror.",
            f"write one of {_FORMS}.",
        )
    if parts.query or parts.fragment:
        raise AssetURIError(
            f"asset URI {_shown(uri)} has a query or fragment, which names nothing in a DBLog dataset.",
            "remove the part from '?' or '#' on; the dataset is the path alone.",
        )
    location = _location(uri, parts.path)
    if kind == MIRROR:
        location = _mirror(uri, location)
    return DBLogAssetURI(kind, location)


def _location(uri: str, path: str) -> str:
    """The lake root or mirror directory a URI's path holds, in one spelling."""
    text = path[1:] if _NESTED.match(path[1:]) else path  # "/s3://b/x" holds a URL, "/opt/x" a path
    if text.lower().startswith("delta://"):  # the capture's output URL names the same root
        text = text[len("delta://") :]
    m = _NESTED.match(text)
    if m and m.group(1).lower() != "file":
        return _store_url(uri, text, m.group(1).lower())
    if m:  # file:/x, file:///x
        text = urlsplit(text).path
    text = re.sub("/+", "/", text)
    if not text.startswith("/"):
        raise AssetURIError(
            f"asset URI {_shown(uri)} names the relative path {text!r}: its meaning would depend on "
            "the directory each Airflow process runs in.",
            "name the lake by its absolute path (dblog://changelog/opt/dblog/lake), as every process sees it.",
        )
    text = posixpath.normpath(text)
    if text == "/":
        raise AssetURIError(f"asset URI {_shown(uri)} names no lake.", f"write one of {_FORMS}.")
    return text


def _store_url(uri: str, text: str, scheme: str) -> str:
    url = urlsplit(text)
    if scheme not in _STORES:
        raise AssetURIError(
            f"asset URI {_shown(uri)} names a {scheme}:// location; DBLog's changelog and mirrors "
            "are Delta tables on a file system or an object store.",
            f"use an absolute path or one of {', '.join(sorted(_STORES))}:// (a Kafka changelog is "
            "topics: the Kafka provider's kafka:// assets name them).",
        )
    user, _, host = url.netloc.rpartition("@")
    if ":" in user or (user and scheme not in _CONTAINER_AT):
        raise AssetURIError(
            f"asset URI {_shown(uri)} carries credentials (user:password@ before the bucket); an "
            "asset's URI is shown in Airflow's UI and stored in its database.",
            "remove them: an object store's keys come from its usual environment variables or a connection.",
        )
    if not host or url.query or url.fragment:
        raise AssetURIError(
            f"asset URI {_shown(uri)} names no bucket (or has a query) in its {scheme}:// location.",
            f"write {scheme}://<bucket>/<prefix>, e.g. dblog://changelog/{scheme}://lake/dblog.",
        )
    key = re.sub("/+", "/", url.path).rstrip("/")
    return f"{scheme}://{url.netloc}{posixpath.normpath(key) if key else ''}"


def _mirror(uri: str, location: str) -> str:
    """``<mirrors>/<source>/<table>``: a root, a source id, a schema-qualified table."""
    m = _NESTED.match(location)
    key = urlsplit(location).path if m else location
    segments = key.strip("/").split("/")
    if len(segments) < (2 if m else 3):
        raise AssetURIError(
            f"asset URI {_shown(uri)} does not name a mirror: it needs the mirrors' root, a source id and a table.",
            "write dblog://mirror/<mirrors root>/<source id>/<schema>.<table>, e.g. "
            "dblog://mirror/opt/dblog/lake/mirrors/shop/shop.orders.",
        )
    source, table = segments[-2], segments[-1]
    if source.startswith("_"):
        raise AssetURIError(
            f"asset URI {_shown(uri)} names {source!r} as the source; names starting with '_' under the "
            "mirrors' root are the landing's own (_checkpoints), not sources.",
            "name the source id the capture writes (the [source] id, the connection's source_id extra).",
        )
    try:
        spelt = canonical(table)
    except RequestError as e:
        raise AssetURIError(
            f"asset URI {_shown(uri)} names no mirror table: {e.cause}",
            "end it with the table as the changelog spells it, <schema>.<table> (shop.orders).",
        ) from None
    return location[: len(location) - len(table)] + spelt


def _shown(uri: str) -> str:
    """The URI as a message may show it: without a password, whatever it held."""
    return repr(re.sub(r"(//[^/@\s]*):[^/@\s]*@", r"\1:***@", uri))


# -- what Airflow calls (get_provider_info's asset-uris) ------------------------------------
def sanitize_uri(uri: SplitResult) -> SplitResult:
    """The URI handler: Airflow has lower-cased the scheme, dropped a password, sorted the query
    and cut trailing slashes; this checks the rest and gives the one spelling of the dataset."""
    return urlsplit(parse_uri(uri.geturl()).uri)


def create_asset(
    *,
    lake: Optional[str] = None,
    source: Optional[str] = None,
    table: Optional[str] = None,
    mirrors: Optional[str] = None,
    extra: Optional[dict] = None,
) -> Asset:
    """The asset factory: the changelog of ``lake``, or with ``source`` and ``table`` that
    table's mirror under ``mirrors`` (default ``<lake>/mirrors``); named by its URI (``dblog_asset``)."""
    if (source is None) != (table is None):
        raise AssetURIError("a mirror's asset was asked for with only one of source and table.", "pass both.")
    if source is not None and table is not None:
        uri = mirror_uri(source, table, lake=lake, mirrors=mirrors)
    elif lake:
        uri = changelog_uri(lake)
    else:
        raise AssetURIError("a changelog's asset was asked for without its lake.", "pass lake=<lake root>.")
    return dblog_asset(uri, extra=extra)


def dblog_asset(uri: str, *, extra: Optional[dict] = None, watchers: Optional[list] = None) -> Asset:
    """The one asset of a ``dblog://`` dataset: its name is its URI in the handler's spelling.

    Airflow identifies an asset by name *and* URI, and keeps at most one active asset per name
    and one per URI (``AssetActive``: a unique index on each). An asset whose name or URI an
    active asset already has with the other part different is left inactive, and a task's
    outlet events on an inactive asset are dropped with only a warning in the task's log. One
    fixed name for the changelogs of different lakes (two sources, a moved lake) therefore let
    only the first one's events through; named by its URI, each dataset is one asset, and the
    same asset whichever DAG declares it. (``Asset(uri=...)`` alone would take the name as
    written, before the handler normalises the URI: ``dblog://changelog/opt/lake/`` would be a
    second name for the same URI.)"""
    from airflow.sdk import Asset

    spelt = parse_uri(uri).uri
    return Asset(name=spelt, uri=spelt, extra=extra, watchers=watchers or [])


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Any:
    """The OpenLineage dataset of a ``dblog://`` asset: the namespace and name lineage.py gives
    the same changelog or mirror (``lineage_context``, the hook that reported it, is not needed)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    namespace, name = parse_uri(asset.uri).dataset()
    return Dataset(namespace=namespace, name=name)


# -- the example DAGs' assets -----------------------------------------------------------------
# The name-only asset (``Asset("dblog_changelog")``: URI = name) that earlier builds' DAGs
# emitted for every changelog. The capture and dump DAGs still emit it beside the changelog's
# own asset (``changelog_outlets``), so that a DAG scheduled on it keeps its runs; being the same
# name and URI everywhere, it never conflicts with another asset.
COMPAT_CHANGELOG_ASSET = "dblog_changelog"


def lake_of(changelog: str) -> Optional[str]:
    """The Delta lake root a capture's changelog URL writes to (``delta:///data/lake``, a bare
    path, ``s3://...``), or None for the outputs that are no Delta table (Kafka, JSON lines,
    a Python callable)."""
    text = (changelog or "").strip()
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", text)
    if m is None:
        return None if (not text or re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", text)) else text
    scheme = m.group(1).lower()
    return text if scheme == "delta" or scheme in _STORES or scheme == "file" else None


def changelog_asset(changelog: Optional[str]) -> Asset:
    """The asset of the changelog that the capture URL ``changelog`` writes: for a Delta lake
    ``dblog://changelog/<lake>``, named by its URI (``dblog_asset``), so two changelogs are two assets
    and every DAG that emits it or is scheduled on it, built from the same URL, names the same
    one; for a changelog that is no Delta table (Kafka, JSON lines, a callable), which has no
    ``dblog://`` URI, the name-only ``dblog_changelog``."""
    from airflow.sdk import Asset

    lake = lake_of(changelog or "")
    return dblog_asset(changelog_uri(lake)) if lake else Asset(COMPAT_CHANGELOG_ASSET)


def changelog_outlets(changelog: Optional[str], compat: Optional[str] = COMPAT_CHANGELOG_ASSET) -> list[Asset]:
    """What a task writing to ``changelog`` emits: its changelog's asset and, unless ``compat``
    is empty, the name-only asset ``compat`` (earlier builds' only one, ``dblog_changelog``) for
    the DAGs scheduled on that."""
    from airflow.sdk import Asset

    outlets = [changelog_asset(changelog)]
    if compat and compat.strip() and Asset(compat.strip()) not in outlets:
        outlets.append(Asset(compat.strip()))
    return outlets


def commits_asset(lake: str, watchers: list) -> Asset:
    """The asset ``dblog_land``'s changelog watcher fires: ``dblog://commits/<lake>``, named by
    its URI (``dblog_asset``); for a location that is no Delta lake, the name-only
    ``dblog_changelog_commits`` of earlier builds."""
    from airflow.sdk import Asset

    root = lake_of(lake)
    if root:
        return dblog_asset(commits_uri(root), watchers=watchers)
    return Asset(f"{COMPAT_CHANGELOG_ASSET}_commits", watchers=watchers)
