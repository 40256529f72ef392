"""The serving benchmark's tables, plots and report section, made from its results
(``serving_bench`` runs the benchmark and calls these; this module never runs it)."""

from __future__ import annotations

from pathlib import Path

from inference_pipeline.loadtest.generator import LevelResult
from inference_pipeline.loadtest.report import plot_latency_vs_throughput

SPEEDUP_TARGET = 1.3
OVERHEAD_TARGET_MS = 1.0


def _levels(rows: list[dict]) -> list[LevelResult]:
    return [LevelResult(**row) for row in rows]


def batching_rows(results) -> list[list[object]]:
    rows = []
    for workload, configs in results.batching.items():
        base = configs["unbatched"]
        for config in ("batched", "unbatched"):
            figures = configs[config]
            rows.append([
                workload, config, round(figures["throughput"], 1), round(figures["p50"], 2),
                round(figures["p99"], 2), round(figures["throughput"] / base["throughput"], 2),
                round(figures.get("avg_batch", float("nan")), 2),
                round(figures.get("compute_ms_per_row", float("nan")), 3), figures["errors"],
            ])  # fmt: skip
    return rows


BATCHING_COLUMNS = [
    "workload", "server", "answers/s", "p50 ms", "p99 ms", "vs unbatched", "avg batch",
    "model ms/row", "errors",
]  # fmt: skip
SWEEP_COLUMNS = ["server", "concurrency", "answers/s", "p50 ms", "p90 ms", "p99 ms"]


def sweep_rows(results) -> list[list[object]]:
    return [
        [name, row["level"], round(row["throughput"], 1)]
        + [round(row["latency_ms"].get(p, float("nan")), 2) for p in ("p50", "p90", "p99")]
        for name, rows in results.sweep.items()
        for row in rows
    ]


def overhead_rows(results) -> list[list[object]]:
    p50 = results.overhead["p50_ms"]
    return [
        ["ONNX Runtime called directly (tokenize + run)", round(p50["direct"], 3), 0.0],
        ["through the batcher, max_queue_delay 0", round(p50["batcher"], 3),
         round(results.overhead["overhead_ms"], 3)],
        ["through the batcher, max_queue_delay 2 ms", round(p50["batcher_delay_2ms"], 3),
         round(results.overhead["overhead_with_delay_ms"], 3)],
    ]  # fmt: skip


def comparison_rows(figures_by_server: dict) -> list[list[object]]:
    return [
        [name, round(f["throughput"], 1), round(f["p50"], 2), round(f["p99"], 2), f["errors"]]
        for name, f in figures_by_server.items()
    ]


COMPARISON_COLUMNS = ["server", "answers/s", "p50 ms", "p99 ms", "errors"]


def compute_rows(results) -> list[list[object]]:
    per_text = results.overhead.get("compute_per_text_ms", {})
    base = per_text.get("batch 1")
    return [[name, round(ms, 3), round(base / ms, 2)] for name, ms in per_text.items()]


COMPUTE_COLUMNS = ["model alone, short texts", "ms per text", "speed-up"]


def markdown_table(columns: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def plot_batching(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(results.batching)
    figure, (left, right) = plt.subplots(1, 2, figsize=(8, 3.5))
    width = 0.38
    for offset, config in ((-width / 2, "batched"), (width / 2, "unbatched")):
        xs = [i + offset for i in range(len(workloads))]
        left.bar(xs, [results.batching[w][config]["throughput"] for w in workloads], width,
                 label=config)  # fmt: skip
        right.bar(xs, [results.batching[w][config]["p99"] for w in workloads], width, label=config)
    for axes, title in ((left, "throughput (answers/s)"), (right, "p99 latency (ms)")):
        axes.set_xticks(range(len(workloads)), workloads)
        axes.set_title(title)
        axes.grid(True, axis="y", alpha=0.3)
    left.legend()
    figure.suptitle(f"dynamic batching vs max_batch_size 1, concurrency 16 ({results.model})")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_outputs(results, out: Path) -> list[str]:
    """results.json, tables.md and two plots under ``out``; returns the printed summary."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(results.to_json())
    plot_batching(results, out / "batching.png")
    series = {name: _levels(rows) for name, rows in results.sweep.items()}
    plot_latency_vs_throughput(out / "sweep.png", series, f"concurrency sweep ({results.model})")
    parts = [
        f"Model: {results.model_note}. Machine: {results.machine}.",
        "Dynamic batching vs none (concurrency 16, medians over rounds):",
        markdown_table(BATCHING_COLUMNS, batching_rows(results)),
        "Batcher overhead at concurrency 1 (p50, in-process):",
        markdown_table(["path", "p50 ms", "over direct ms"], overhead_rows(results)),
        "What batching buys the model alone (no server, same short texts):",
        markdown_table(COMPUTE_COLUMNS, compute_rows(results)),
        "Concurrency sweep (short texts):",
        markdown_table(SWEEP_COLUMNS, sweep_rows(results)),
    ]
    if results.length_aware:
        parts += [
            "Length-aware batching, mixed titles and bodies (concurrency 16):",
            markdown_table(COMPARISON_COLUMNS, comparison_rows(results.length_aware)),
        ]
    if results.ray:
        parts += ["This server vs Ray Serve (1 replica, same batching, concurrency 16):",
                  markdown_table(COMPARISON_COLUMNS, comparison_rows(results.ray))]  # fmt: skip
    text = "\n\n".join(parts)
    (out / "tables.md").write_text(text + "\n")
    return [text, f"written: {out}/results.json, tables.md, batching.png, sweep.png"]


def checks(results) -> list:
    from phase01_common.report import Check

    short = results.batching["short"]
    speedup = short["batched"]["throughput"] / short["unbatched"]["throughput"]
    p99 = (short["batched"]["p99"], short["unbatched"]["p99"])
    overhead = results.overhead["overhead_ms"]
    checks = [
        Check(f"dynamic batching >= {SPEEDUP_TARGET}x throughput (short texts, c=16)",
              speedup >= SPEEDUP_TARGET, f"{speedup:.2f}x", benchmark=True),
        Check("dynamic batching p99 <= unbatched p99 (short texts, c=16)", p99[0] <= p99[1],
              f"{p99[0]:.1f} ms vs {p99[1]:.1f} ms", benchmark=True),
        Check(f"batcher overhead at c=1 <= {OVERHEAD_TARGET_MS} ms (p50)",
              overhead <= OVERHEAD_TARGET_MS, f"{overhead:.3f} ms", benchmark=True),
    ]  # fmt: skip
    errors = sum(configs[c]["errors"] for configs in results.batching.values()
                 for c in ("batched", "unbatched"))  # fmt: skip
    checks.append(Check("no request failed during the benchmark", errors == 0, f"{errors} errors"))
    if results.ray:
        ours, ray = results.ray["this server"], results.ray["Ray Serve"]
        checks.append(Check("this server beats Ray Serve on one machine (throughput, c=16)",
                            ours["throughput"] > ray["throughput"],
                            f"{ours['throughput']:.1f} vs {ray['throughput']:.1f} answers/s",
                            benchmark=True))  # fmt: skip
    return checks


def section_from_results(results, out_dir: Path):
    """The serving part of the inference-pipeline report (a phase01_common Section), from
    ``serving_bench.BenchResults`` whose outputs were written to ``out_dir``."""
    from phase01_common.report import Image, Section, Table

    short = results.batching["short"]
    speedup = short["batched"]["throughput"] / short["unbatched"]["throughput"]
    section = Section(title="Serving: dynamic batching on the v2 protocol")
    section.headline = [
        ("dynamic batching vs none, short texts, c=16",
         f"{speedup:.2f}x throughput, p99 {short['batched']['p99']:.1f} vs "
         f"{short['unbatched']['p99']:.1f} ms"),
        ("batcher overhead at concurrency 1 (p50)",
         f"{results.overhead['overhead_ms']:.3f} ms (target <= {OVERHEAD_TARGET_MS} ms)"),
    ]  # fmt: skip
    section.checks = checks(results)
    section.tables = [
        Table("Dynamic batching vs none (c=16)", BATCHING_COLUMNS, batching_rows(results)),
        Table("Batcher overhead at c=1 (p50, in-process)", ["path", "p50 ms", "over direct ms"],
              overhead_rows(results)),
        Table("What batching buys the model alone", COMPUTE_COLUMNS, compute_rows(results)),
        Table("Concurrency sweep (short texts)", SWEEP_COLUMNS, sweep_rows(results)),
    ]  # fmt: skip
    if results.length_aware:
        section.tables.append(
            Table(
                "Length-aware batching, mixed lengths (c=16)",
                COMPARISON_COLUMNS,
                comparison_rows(results.length_aware),
            )
        )
    if results.ray:
        section.tables.append(Table("This server vs Ray Serve (c=16)", COMPARISON_COLUMNS,
                                    comparison_rows(results.ray)))  # fmt: skip
    section.images = [
        Image(out_dir / "batching.png", f"Batching vs none at c=16 ({results.model_note})"),
        Image(out_dir / "sweep.png", "Latency vs throughput over the concurrency sweep"),
    ]
    section.texts = [("machine", f"{results.machine}. Figures move with the machine's load.")]
    return section
