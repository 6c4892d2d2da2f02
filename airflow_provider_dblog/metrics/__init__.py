"""The capture's metrics through OpenTelemetry: a Prometheus scrape endpoint and/or OTLP
(docs/operations.md)."""

from .capture import CaptureMetrics, start_metrics

__all__ = ["CaptureMetrics", "start_metrics"]
