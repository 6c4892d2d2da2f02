"""The exporters every DBLog process offers (the capture, the landing job): a Prometheus
scrape endpoint on an opt-in port, and OTLP when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``
/ ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` is set (HTTP/protobuf; the interval from
``OTEL_METRIC_EXPORT_INTERVAL``, as the SDK reads it)."""

from __future__ import annotations

import os
from typing import Optional

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from ..core.errors import ConfigurationError


def meter_provider(
    service: str, attributes: dict[str, str], port: Optional[int] = None, host: str = "0.0.0.0", what: str = "metrics"
) -> Optional[MeterProvider]:
    """A provider exporting to Prometheus on ``host:port`` (``port`` given) and/or OTLP (its
    environment set); None when neither is asked for. ``service``: the default
    ``service.name`` (``OTEL_SERVICE_NAME`` wins); ``what``: the process, for the error."""
    readers: list[MetricReader] = []
    if port is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        try:
            start_http_server(port, addr=host)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve the {what} on {host}:{port}: {exc.strerror or exc}.",
                "pass a free --metrics-port (each process on a host needs a port of its own), or leave it out.",
            ) from None
        readers.append(PrometheusMetricReader())
    if os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    if not readers:
        return None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service), **attributes})
    return MeterProvider(metric_readers=readers, resource=resource)
