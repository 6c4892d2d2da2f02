"""The status page: what ``dblog status`` prints, as HTML (and JSON) on Airflow's API server.

Mounted by the plugin under ``/dblog``: ``/dblog/status?state_conn_id=C&source_id=S`` (HTML,
refreshing itself) and ``/dblog/status.json?...``. Both need an Airflow login (the UI's
session cookie or a bearer token: Airflow does not guard a plugin's app by itself). The page
only reads: the state store is opened without creating anything (``create=False``), through
a ``dblog_state`` connection only, never a path or URL from the request.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' parameter annotations,
# which name build_app's local ``Required``.
import datetime
import html
import json
from typing import Annotated, Any, Optional
from urllib.parse import urlencode

PREFIX = "/dblog"  # where the plugin mounts the app on the API server
STATE_CONN_TYPE = "dblog_state"
REFRESH_SECONDS = 10


def page_path(state_conn_id: str, source_id: str, fmt: str = "") -> str:
    """The page's path (after the API server's base URL)."""
    return f"{PREFIX}/status{fmt}?" + urlencode({"state_conn_id": state_conn_id, "source_id": source_id})


class StatusError(Exception):
    """A request the page cannot answer: (HTTP status, cause, fix)."""

    def __init__(self, code: int, cause: str, fix: str) -> None:
        super().__init__(cause)
        self.code, self.cause, self.fix = code, cause, fix


def read(state_conn_id: str, source_id: str) -> dict[str, Any]:
    """``dblog status --json`` of ``source_id`` in the store of ``state_conn_id``."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    from ..config import make_state
    from ..core.dump_requests import read_status
    from ..core.errors import DBLogError
    from ..hooks.dblog import DBLogHook
    from ..state.lease import make_lease

    hook = DBLogHook(state_conn_id=state_conn_id)
    try:
        conn = hook._connection(state_conn_id)  # the hook's own lookup (secrets backends, then the database)
    except AirflowNotFoundException:
        raise StatusError(
            404, f"no connection {state_conn_id!r}.", "use the state connection the capture task names."
        ) from None
    if conn.conn_type != STATE_CONN_TYPE:
        raise StatusError(
            400,
            f"connection {state_conn_id!r} has type {conn.conn_type!r}, not {STATE_CONN_TYPE!r}.",
            "use the capture's dblog_state connection.",
        )
    try:
        state = make_state(hook.state_config(), create=False)
    except DBLogError as e:
        raise StatusError(503, str(e), "check the state connection (dblog doctor --state-conn-id).") from None
    try:
        return read_status(state, source_id, make_lease(state, source_id))
    finally:
        state.close()


def _utc(ts: Optional[float]) -> str:
    if not ts:
        return "-"
    return datetime.datetime.fromtimestamp(float(ts), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cell(value: Any) -> str:
    """A value as the page shows it: thousands separated, one decimal, ``-`` for nothing."""
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _capture_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    c = status["capture"]
    leader = status.get("leader") or c.get("leader") or {}
    outage = c.get("output_outage")
    state = c.get("state", "?")
    pairs = [
        ("state", state + (f": {c['why']}" if c.get("why") and state != "running" else "")),
        ("process", str(c.get("pid"))),  # an id: no thousands separator
        ("last report", f"{_utc(c.get('updated_at'))} ({c.get('age_s')} s ago)"),
        ("position", c.get("position")),
        ("checkpoint (stored)", status.get("checkpoint")),  # live: the store's, not the report's
        ("events/s", c.get("events_per_s")),
        ("lag (s)", c.get("lag_seconds")),
        ("lag (bytes)", c.get("lag_bytes")),
        ("watermark window", c.get("window")),
        ("writer buffer", f"{c.get('buffered', 0):,} events, {c.get('buffered_mb', 0)} MB"),
        ("events written", c.get("events_written")),
        ("output commits", c.get("output_commits")),
        (
            "output outage",
            f"{outage['seconds']} s, {outage['attempts']} attempts: {outage['error']}" if outage else "none",
        ),
        ("leader", f"{leader.get('identity')} (epoch {leader.get('epoch')})" if leader else None),
        ("reconnects", c.get("reconnects")),
    ]
    return [(k, _cell(v)) for k, v in pairs]


def _dump_rows(status: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for d in sorted(status.get("dumps") or [], key=lambda d: d.get("created_at") or 0, reverse=True):
        estimated = sum(t.get("estimated_rows", 0) for t in d["progress"].values())
        if d["status"] == "done":
            progress = "100%"
        else:
            progress = f"{min(100.0, 100 * d['rows'] / estimated):.1f}%" if estimated else ""
        text = d["status"] + (" (paused)" if d.get("paused") else "") + (f": {d['error']}" if d.get("error") else "")
        eta = d.get("eta_seconds")
        rows.append(
            {
                "id": d["dump_id"],
                "status": d["status"],
                "text": text,
                "tables": d["tables"] if isinstance(d["tables"], str) else ", ".join(d["tables"]),
                "rows": _cell(d["rows"]),
                "chunks": _cell(d["chunks"]),
                "progress": _cell(progress),
                "eta": _cell(f"{eta:.0f} s" if isinstance(eta, (int, float)) else None),
            }
        )
    return rows


# Jinja2 (Airflow's own template engine) with autoescape: every value from the store is text.
TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{ refresh }}">
<title>DBLog: {{ source_id }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1f2933; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 1.5rem; }
table { border-collapse: collapse; } th, td { padding: .3rem .7rem; text-align: left; vertical-align: top; }
table.kv th { color: #52606d; font-weight: 600; } table.grid th { border-bottom: 2px solid #cbd2d9; }
table.grid td { border-bottom: 1px solid #e4e7eb; } #warnings li { color: #b44d12; }
.muted { color: #7b8794; font-size: .9rem; }
</style></head><body>
<h1>DBLog capture of source <code id="source">{{ source_id }}</code></h1>
<p class="muted">State store: connection <code>{{ state_conn_id }}</code>. As of {{ now }};
refreshes every {{ refresh }} s. <a href="{{ json_link }}">JSON</a> (what <code>dblog status --json</code> prints).</p>
<h2>Capture</h2>
{% if capture %}<table class="kv" id="capture" data-state="{{ state }}">
{% for k, v in capture %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>
{% endfor %}</table>
{% else %}<p>No capture of this source has reported to this state store yet.</p>{% endif %}
<h2>Warnings</h2>
{% if warnings %}<ul id="warnings">{% for w in warnings %}<li>{{ w }}</li>{% endfor %}</ul>
{% else %}<p>None.</p>{% endif %}
<h2>Dumps</h2>
{% if dumps %}<table class="grid" id="dumps">
<tr><th>dump</th><th>status</th><th>tables</th><th>rows</th><th>chunks</th><th>progress</th><th>ETA</th></tr>
{% for d in dumps %}<tr class="dump" data-status="{{ d.status }}"><td>{{ d.id }}</td><td>{{ d.text }}</td>
<td>{{ d.tables }}</td><td>{{ d.rows }}</td><td>{{ d.chunks }}</td><td>{{ d.progress }}</td><td>{{ d.eta }}</td></tr>
{% endfor %}</table>
{% else %}<p>No dumps.</p>{% endif %}
</body></html>
"""


def render(status: dict[str, Any], state_conn_id: str) -> str:
    """The HTML page of one source's status (read's result)."""
    import jinja2

    source_id = str(status.get("source_id"))
    capture = status.get("capture")
    return (
        jinja2.Environment(autoescape=True)
        .from_string(TEMPLATE)
        .render(
            refresh=REFRESH_SECONDS,
            source_id=source_id,
            state_conn_id=state_conn_id,
            now=_utc(datetime.datetime.now(datetime.timezone.utc).timestamp()),
            json_link=page_path(state_conn_id, source_id, ".json").rsplit("/", 1)[1],  # relative: behind proxies too
            capture=_capture_rows(status) if capture else None,
            state=(capture or {}).get("state", "?"),
            warnings=[str(w) for w in status.get("warnings") or []],
            dumps=_dump_rows(status),
        )
    )


def build_app() -> Any:
    """The FastAPI app the plugin mounts at ``PREFIX``."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, FastAPI, Query
    from fastapi.responses import HTMLResponse, JSONResponse

    # every route needs an Airflow login: the UI's session cookie or a bearer token
    app = FastAPI(
        title="DBLog status", docs_url=None, redoc_url=None, openapi_url=None, dependencies=[Depends(get_user)]
    )
    Required = Annotated[str, Query(min_length=1)]

    def answer(state_conn_id: str, source_id: str, as_json: bool) -> Any:
        try:
            status = read(state_conn_id, source_id)
        except StatusError as e:
            if as_json:
                return JSONResponse({"error": e.cause, "fix": e.fix}, status_code=e.code)
            text = f"<p><b>{html.escape(e.cause)}</b></p><p>Fix: {html.escape(e.fix)}</p>"  # one line: no template
            return HTMLResponse(f"<!doctype html><title>DBLog status</title>{text}", status_code=e.code)
        if as_json:
            return JSONResponse(json.loads(json.dumps(status, default=str)))
        return HTMLResponse(render(status, state_conn_id))

    # sync endpoints: FastAPI runs them in its thread pool (the store clients block)
    @app.get("/status", response_class=HTMLResponse)
    def status_page(state_conn_id: Required, source_id: Required) -> Any:
        return answer(state_conn_id, source_id, as_json=False)

    @app.get("/status.json")
    def status_json(state_conn_id: Required, source_id: Required) -> Any:
        return answer(state_conn_id, source_id, as_json=True)

    return app


class StatusApp:
    """The page's ASGI app as the plugin mounts it: the FastAPI app is built at the first
    request. Every Airflow process loads plugins (a task's too, for listeners), and building
    the app imports Airflow's API security (about a second); only the API server serves it."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = build_app()
        await self._app(scope, receive, send)
