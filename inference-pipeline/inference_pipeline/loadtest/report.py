"""Load-test results as a table, JSON and a latency-versus-throughput plot."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path

from inference_pipeline.loadtest.generator import LevelResult

COLUMNS = ("level", "answers/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "ok", "rejects", "errors")


def format_table(results: Sequence[LevelResult]) -> str:
    """A fixed-width table, one row per load level."""
    rows = [COLUMNS]
    for r in results:
        label = f"c={r.level:g}" if r.mode == "concurrency" else f"{r.level:g}/s"
        lat = r.latency_ms
        rows.append(
            (
                label,
                f"{r.throughput:.1f}",
                *(f"{lat[p]:.2f}" if p in lat else "-" for p in ("p50", "p90", "p95", "p99")),
                str(r.successes),
                str(r.rejects),
                str(r.errors),
            )
        )
    return fixed_width(rows)


def fixed_width(rows: Sequence[Sequence[str]]) -> str:
    """Right-aligned columns, two spaces apart (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def write_json(path: Path, results: Sequence, settings: dict) -> None:
    """``results``: LevelResult or GenerationLevelResult (anything with ``as_dict``)."""
    document = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "settings": settings,
        "levels": [r.as_dict() for r in results],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2))


def plot_latency_vs_throughput(
    path: Path, series: dict[str, Sequence[LevelResult]], title: str = "latency vs throughput"
) -> None:
    """p50 (solid) and p99 (dashed) latency against throughput, one colour per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for index, (name, results) in enumerate(series.items()):
        points = [r for r in results if r.latency_ms]
        if not points:
            continue
        color = f"C{index}"
        x = [r.throughput for r in points]
        axes.plot(x, [r.latency_ms["p50"] for r in points], "o-", color=color, label=f"{name} p50")
        axes.plot(x, [r.latency_ms["p99"] for r in points], "s--", color=color, label=f"{name} p99")
        for r in points:
            label = f"c{r.level:g}" if r.mode == "concurrency" else f"{r.level:g}/s"
            axes.annotate(label, (r.throughput, r.latency_ms["p99"]), fontsize=7, alpha=0.7)
    axes.set_xlabel("throughput (answers/s)")
    axes.set_ylabel("latency (ms)")
    axes.set_yscale("log")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
