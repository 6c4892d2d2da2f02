"""The capture's metrics (docs/operations.md, "Metrics"), through OpenTelemetry.

They are read from the status report the capture makes every ``status_interval``
(core/status_report.py, handed over by ``on_progress``), so the event path pays nothing for
them: each instrument is observable and reads the newest report when an exporter collects.
``dblog.capture.report.age`` is computed at collection: a capture whose loop is stuck keeps
answering scrapes, with that age growing.

Exporters (``start_metrics``, exporters.py): a Prometheus scrape endpoint on an opt-in port,
and OTLP when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.
Names and units follow OpenTelemetry's conventions; the Prometheus exporter turns
``dblog.capture.lag`` (unit ``s``) into ``dblog_capture_lag_seconds`` and a counter
``dblog.capture.events`` into ``dblog_capture_events_total``. Attributes carry the source
and dump ids only: nothing from the connection settings.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider

from .exporters import meter_provider

_Callback = Callable[[CallbackOptions], Iterable[Observation]]
# Seconds: a local Delta commit takes milliseconds, an object store's or a broker's up to seconds.
COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # floats: le="30.0"


class CaptureMetrics:
    """The instruments of one capture, fed by ``update(status_report)``."""

    def __init__(self, source_id: str, provider: MeterProvider, clock: Callable[[], float] = time.time):
        self.source_id = source_id
        self.provider = provider
        self._clock = clock
        self._status: dict[str, Any] = {}
        self._attrs = {"dblog.source.id": source_id}
        meter = provider.get_meter("airflow_provider_dblog.capture")
        counters = {
            # (name, unit, description, the report's value)
            ("dblog.capture.events", "{event}", "log change events processed", "events_total"),
            ("dblog.capture.reconnects", "{reconnect}", "reconnects to the source", "reconnects"),
            ("dblog.capture.heartbeats", "{heartbeat}", "heartbeat writes to the watermark table", "heartbeats"),
            ("dblog.capture.output.events", "{event}", "events committed to the output", "events_written"),
            ("dblog.capture.output.commits", "{commit}", "output commits (batches written)", "output_commits"),
            (
                "dblog.capture.output.commit.time",
                "s",
                "time spent in output commits (its rate over the commits' rate: the mean commit latency)",
                "output_commit_seconds",
            ),
            (
                "dblog.capture.output.failures",
                "{attempt}",
                "output writes that failed (retried through an outage, or given up)",
                "output_failures",
            ),
        }
        for name, unit, description, key in sorted(counters):
            meter.create_observable_counter(name, [self._value(key)], unit, description)
        gauges = [
            (
                "dblog.capture.lag",
                "s",
                "newest processed commit to now (0 while the log is idle)",
                self._value("lag_seconds"),
            ),
            (
                "dblog.capture.log.unread",
                "By",
                "log bytes written on the source and not read yet",
                self._value("lag_bytes"),
            ),
            (
                "dblog.capture.log.retained",
                "By",
                "log the source keeps for this capture (PostgreSQL: the slot's WAL)",
                self._log("retained_bytes"),
            ),
            (
                "dblog.capture.writer.buffered",
                "{event}",
                "events read and not yet committed to the output",
                self._value("buffered"),
            ),
            ("dblog.capture.writer.buffered.size", "By", "bytes of those events", self._value("buffered_bytes")),
            (
                "dblog.capture.output.commit.pending",
                "s",
                "how long the output commit under way has taken so far (0 between commits)",
                self._value("output_commit_pending_seconds"),
            ),
            (
                "dblog.capture.output.outage",
                "s",
                "how long the output has refused writes (0 while it accepts them)",
                self._outage,
            ),
            ("dblog.capture.window.open", "1", "1 while a chunk's watermark window is open", self._window),
            ("dblog.capture.leader.epoch", "1", "the epoch of the leader lease this capture holds", self._epoch),
            (
                "dblog.capture.warnings",
                "{warning}",
                "warnings of the source (e.g. the slot's WAL at risk)",
                self._warnings,
            ),
            ("dblog.capture.report.age", "s", "time since the capture's last status report", self._age),
            ("dblog.dump.rows", "{row}", "rows a running dump delivered", self._dump("rows")),
            (
                "dblog.dump.rows.estimated",
                "{row}",
                "rows a running dump is estimated to deliver",
                self._dump("estimated_total"),
            ),
            ("dblog.dump.rate", "{row}/s", "rows per second of a running dump", self._dump("rows_per_s")),
            ("dblog.dump.eta", "s", "estimated time left of a running dump", self._dump("eta_seconds")),
            ("dblog.dump.paused", "1", "1 while a running dump is paused", self._dump("paused")),
        ]
        for name, unit, description, callback in gauges:
            meter.create_observable_gauge(name, [callback], unit, description)
        # The one instrument recorded as it happens (a commit, not an event): its distribution
        # is what the counters' mean hides (a slow commit among fast ones).
        self._commit = meter.create_histogram(
            "dblog.capture.output.commit.duration",
            "s",
            "one output commit (a batch written and made durable)",
            explicit_bucket_boundaries_advisory=COMMIT_BUCKETS,
        )

    def commit(self, seconds: float, events: int) -> None:
        """One output commit went through (the writer's ``on_commit``, on its thread)."""
        self._commit.record(seconds, self._attrs)

    def update(self, status: dict[str, Any]) -> None:
        """The newest status report (one reference swap: exporters read it from their threads)."""
        self._status = status

    # -- callbacks ---------------------------------------------------------------------------
    def _observe(self, value: Any, attrs: Optional[dict[str, str]] = None) -> list[Observation]:
        if value is None or isinstance(value, str):
            return []
        return [Observation(int(value) if isinstance(value, bool) else value, attrs or self._attrs)]

    def _value(self, key: str) -> _Callback:
        return lambda _options: self._observe(self._status.get(key))

    def _log(self, key: str) -> _Callback:
        return lambda _options: self._observe((self._status.get("log") or {}).get(key))

    def _window(self, _options: CallbackOptions) -> list[Observation]:
        window = self._status.get("window")
        return [] if window is None else self._observe(window == "open")

    def _epoch(self, _options: CallbackOptions) -> list[Observation]:
        return self._observe((self._status.get("leader") or {}).get("epoch"))

    def _warnings(self, _options: CallbackOptions) -> list[Observation]:
        return [] if not self._status else self._observe(len(self._status.get("warnings") or ()))

    def _outage(self, _options: CallbackOptions) -> list[Observation]:
        if not self._status:
            return []
        return self._observe((self._status.get("output_outage") or {}).get("seconds", 0.0))

    def _age(self, _options: CallbackOptions) -> list[Observation]:
        updated = self._status.get("updated_at")
        return [] if updated is None else self._observe(max(0.0, self._clock() - updated))

    def _dump(self, key: str) -> _Callback:
        def observe(_options: CallbackOptions) -> list[Observation]:
            out: list[Observation] = []
            for dump_id, health in (self._status.get("dumps") or {}).items():
                out += self._observe(health.get(key), {**self._attrs, "dblog.dump.id": dump_id})
            return out

        return observe


def start_metrics(
    source_id: str, port: Optional[int] = None, host: str = "0.0.0.0", identity: Optional[str] = None
) -> Optional[CaptureMetrics]:
    """The capture's metrics with their exporters (exporters.py): a Prometheus endpoint on
    ``host:port`` (``port`` given) and OTLP (its standard environment set); None when neither
    is asked for."""
    attributes = {"dblog.source.id": source_id}
    if identity:
        attributes["service.instance.id"] = identity
    provider = meter_provider("dblog-capture", attributes, port, host, "capture's metrics")
    return CaptureMetrics(source_id, provider) if provider is not None else None
