"""OpenTelemetry in tests: what an in-memory reader collected."""

from __future__ import annotations


def collected(reader) -> dict:
    """name -> {attributes as sorted pairs: data point} (``.value`` of a counter or gauge,
    ``.count`` / ``.sum`` / ``.explicit_bounds`` of a histogram)."""
    out: dict = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    out.setdefault(m.name, {})[tuple(sorted(p.attributes.items()))] = p
    return out
