"""Percentile summaries of latency samples, named the way the reports print them (``p50``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

DEFAULT_PERCENTILES = (50, 90, 99)


def percentiles(
    values: Iterable[float], points: Sequence[float] = DEFAULT_PERCENTILES, *, scale: float = 1.0
) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., "p99": ...}`` of ``values`` times ``scale`` (1e3: seconds
    to milliseconds); linear interpolation between samples, as ``numpy.percentile`` does.
    No values: an empty dict (a level where nothing was answered has no latency)."""
    data = np.asarray(list(values), dtype=np.float64) * scale
    if data.size == 0:
        return {}
    if not np.isfinite(data).all():
        raise ValueError("percentiles of non-finite samples are meaningless")
    return {
        f"p{point:g}": float(v)
        for point, v in zip(points, np.percentile(data, points), strict=True)
    }
