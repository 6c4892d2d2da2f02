"""Adaptive dump pacing (core/pacing.py): AIMD on chunk size and delay by the source's health."""

from __future__ import annotations

import math

from airflow_provider_dblog.core.pacing import (
    CAPTURE_LAG_LIMIT,
    DELAY_STEP_MS,
    MIN_CHUNK,
    REPLICA_LAG_LIMIT,
    Pacer,
    PaceSignals,
)


def healthy(p: Pacer, n: int = 1, per_row: float = 1e-5) -> None:
    for _ in range(n):
        p.observe(PaceSignals(per_row * p.chunk_size, p.chunk_size, 0.0, 0.0))


def test_grows_while_healthy_up_to_the_maximum():
    p = Pacer(1000, 100, max_chunk=2000)
    healthy(p)
    assert (p.chunk_size, p.delay_ms, p.signal) == (1250, 100 - DELAY_STEP_MS, "healthy")
    healthy(p, 20)
    assert (p.chunk_size, p.delay_ms) == (2000, 0)


def test_halves_on_each_distress_signal_and_says_which():
    p = Pacer(4000, 0, max_chunk=50_000)
    p.observe(PaceSignals(0.01, 4000, 0.0, REPLICA_LAG_LIMIT + 1))
    assert (p.chunk_size, p.delay_ms) == (2000, DELAY_STEP_MS) and p.signal.startswith("replica lag")
    p.observe(PaceSignals(0.01, 2000, CAPTURE_LAG_LIMIT + 1, 0.0))
    assert (p.chunk_size, p.delay_ms) == (1000, 2 * DELAY_STEP_MS) and p.signal.startswith("capture lag")
    p.observe(PaceSignals(0.01, 1000, 0.0, math.inf))
    assert "not replicating" in p.signal
    for _ in range(20):
        p.observe(PaceSignals(0.01, 100, 0.0, math.inf))
    assert p.chunk_size == MIN_CHUNK and p.delay_ms == 5000  # bounded both ways


def test_select_latency_against_its_own_baseline():
    p = Pacer(1000, 0, max_chunk=50_000)
    healthy(p, 4, per_row=1e-5)  # the baseline: 10 µs a row
    size = p.chunk_size
    p.observe(PaceSignals(2.5e-5 * size, size, 0.0, None))  # 2.5x: still within the factor
    assert p.signal == "healthy"
    size = p.chunk_size
    p.observe(PaceSignals(5e-5 * size, size, 0.0, None))  # 5x slower a row: the source is busy
    assert p.signal.startswith("select latency") and p.chunk_size == size // 2
    assert p.report() == {"mode": "adaptive", "chunk_size": p.chunk_size, "delay_ms": p.delay_ms, "signal": p.signal}
