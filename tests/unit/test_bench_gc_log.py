"""``GcLog``: Python's collections of a benchmark phase, counted per generation and inside the fault windows."""

from __future__ import annotations

import gc

from akresil.bench.gc_log import GcLog


def test_collections_are_counted_per_generation_and_inside_the_fault_windows() -> None:
    log = GcLog()
    # (generation, start, duration s, collected): two full collections, one of them inside the window 10..20
    log.events[:] = [(0, 1.0, 0.001, 0), (2, 5.0, 0.030, 7), (1, 12.0, 0.002, 0), (2, 15.0, 0.050, 0),
                     (2, 20.0, 0.040, 0)]
    out = log.summary([(10.0, 20.0)])
    assert out["phase"]["gen2"] == {"count": 3, "total_ms": 120.0, "max_ms": 50.0}
    assert out["phase"]["gen0"]["count"] == 1
    assert out["fault"]["gen2"] == {"count": 1, "total_ms": 50.0, "max_ms": 50.0}
    assert out["fault"]["gen1"]["count"] == 1
    assert out["fault"]["gen0"] == {"count": 0, "total_ms": 0.0, "max_ms": 0.0}


def test_it_records_real_collections_only_between_start_and_stop() -> None:
    log = GcLog()
    log.start()
    try:
        gc.collect(1)
        gc.collect(2)
    finally:
        log.stop()
    seen = list(log.events)
    gc.collect(2)
    assert log.events == seen
    gens = [g for g, *_ in seen]
    assert 1 in gens and 2 in gens
    assert log._callback not in gc.callbacks
    assert all(d >= 0 for _, _, d, _ in log.events)
