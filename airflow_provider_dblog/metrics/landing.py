"""The landing job's metrics (docs/operations.md, "Metrics"), through OpenTelemetry.

Recorded by the Lander once per table and micro-batch (spark/lander.py), in the driver: a
handful of calls per batch, nothing per event. Exported as the capture's are (exporters.py:
``land_changelog --metrics-port`` for Prometheus, OTLP by its standard environment).

- ``dblog.landing.events`` (counter): change events merged into the mirrors.
- ``dblog.landing.batches`` (counter): mirror commits, one per table and micro-batch.
- ``dblog.landing.merge.duration`` (histogram, s): one table's merge and commit.
- ``dblog.landing.latency`` (histogram, s): from the source's commit of the newest change in a
  table's batch to its mirror commit: the commit -> mirror freshness users feel.
- ``dblog.landing.commit.newest`` (gauge, s since the epoch): the source commit time of the
  newest change in each mirror; ``time() - it`` is how stale the mirror is, idle source or not.
- ``dblog.landing.stopped`` (gauge): mirrors that stopped landing (an incompatible schema change).

Attributes: the source id and the table (``dblog.source.id``, ``dblog.table``) only.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider

from .exporters import meter_provider

# Seconds: merges take from a fraction of a second to minutes, freshness from seconds to hours.
LATENCY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class LandingMetrics:
    """The instruments of one landing job; ``landed`` / ``stopped`` are called by the Lander
    from its tables' worker threads."""

    def __init__(self, provider: MeterProvider):
        self.provider = provider
        meter = provider.get_meter("airflow_provider_dblog.landing")
        self._events = meter.create_counter("dblog.landing.events", "{event}", "change events merged into mirrors")
        self._batches = meter.create_counter("dblog.landing.batches", "{commit}", "mirror commits (table x batch)")
        self._merge = meter.create_histogram(
            "dblog.landing.merge.duration",
            "s",
            "one table's merge and mirror commit",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
        )
        self._latency = meter.create_histogram(
            "dblog.landing.latency",
            "s",
            "source commit of a batch's newest change to its mirror commit",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
        )
        self._lock = threading.Lock()
        self._newest: dict[tuple[str, str], float] = {}
        self._stopped: set[tuple[str, str]] = set()
        meter.create_observable_gauge(
            "dblog.landing.commit.newest", [self._observe_newest], "s", "source commit time of a mirror's newest change"
        )
        meter.create_observable_gauge(
            "dblog.landing.stopped", [self._observe_stopped], "{mirror}", "mirrors that stopped landing"
        )

    @staticmethod
    def _attrs(source_id: str, table: str) -> dict[str, str]:
        return {"dblog.source.id": source_id, "dblog.table": table}

    def landed(
        self, source_id: str, table: str, events: int, seconds: float, newest_commit: Optional[float], now: float
    ) -> None:
        """A table's batch is committed: ``events`` merged in ``seconds``; ``newest_commit`` the
        source commit time of its newest change (None: dump rows only, which carry none)."""
        attrs = self._attrs(source_id, table)
        self._events.add(events, attrs)
        self._batches.add(1, attrs)
        self._merge.record(seconds, attrs)
        if newest_commit is not None:
            self._latency.record(max(0.0, now - newest_commit), attrs)
            with self._lock:
                key = (source_id, table)
                self._newest[key] = max(newest_commit, self._newest.get(key, 0.0))

    def stopped(self, source_id: str, table: str) -> None:
        with self._lock:
            self._stopped.add((source_id, table))

    def _observe_newest(self, _options: CallbackOptions) -> list[Observation]:
        with self._lock:
            return [Observation(ts, self._attrs(s, t)) for (s, t), ts in sorted(self._newest.items())]

    def _observe_stopped(self, _options: CallbackOptions) -> list[Observation]:
        with self._lock:
            by_source: dict[str, int] = {}
            for s, _t in self._stopped:
                by_source[s] = by_source.get(s, 0) + 1
        return [Observation(n, {"dblog.source.id": s}) for s, n in sorted(by_source.items())]


def start_landing_metrics(
    port: Optional[int] = None, host: str = "0.0.0.0", source: Optional[str] = None
) -> Optional[LandingMetrics]:
    """The landing job's metrics with their exporters; None when none is asked for."""
    attributes: dict[str, Any] = {"dblog.source.id": source} if source else {}
    provider = meter_provider("dblog-landing", attributes, port, host, "landing job's metrics")
    return LandingMetrics(provider) if provider is not None else None
