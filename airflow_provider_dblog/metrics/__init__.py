"""DBLog's metrics through OpenTelemetry: the capture's and the landing job's, each with a
Prometheus scrape endpoint and/or OTLP (docs/operations.md)."""

from .capture import CaptureMetrics, start_metrics
from .landing import LandingMetrics, start_landing_metrics

__all__ = ["CaptureMetrics", "LandingMetrics", "start_landing_metrics", "start_metrics"]
