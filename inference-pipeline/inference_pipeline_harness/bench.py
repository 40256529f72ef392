"""`python -m inference_pipeline bench [DIR/model_repository]`: every variant timed in one run.

Latency p50/p90/p99 at batch 1, sequence 128, and throughput at batch 8, sequence 128, for
torch eager (SDPA attention, the baseline) and each promoted ONNX Runtime variant, with ratios to
torch eager. The models are timed in interleaved rounds (each round calls every model once),
so load from other processes on a shared machine hits all of them alike; the baseline's
median over the first and the second half of the rounds shows how much the load drifted.
Every figure states its thread count.

Without a repository argument the full build is made (once per settings + code key) under
``~/.cache/inference_pipeline/builds/``, so ``make bench`` works on a fresh clone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

SEQUENCE = 128
THROUGHPUT_BATCH = 8
SPEEDUP_TARGET = 3.0  # best promoted variant vs torch eager, batch 1
INT8_TARGET = 1.5  # best INT8 vs ONNX Runtime FP32 of the same export


@dataclass
class Timing:
    name: str
    kind: str  # torch / fp32 / int8 / fp16
    route: str
    p50: float
    p90: float
    p99: float
    throughput: float  # sequences per second at batch 8
    ratio_p50: float = float("nan")  # torch eager p50 / this p50 (speedup)
    ratio_throughput: float = float("nan")


@dataclass
class BenchResult:
    threads: int
    iterations: int
    timings: list[Timing] = field(default_factory=list)
    torch_p50_first_last: tuple[float, float] = (float("nan"), float("nan"))
    best_speedup: tuple[str, float] = ("", float("nan"))
    int8_vs_fp32: tuple[str, float] = ("", float("nan"))

    def rows(self) -> list[list[object]]:
        return [
            [
                t.name,
                t.kind,
                t.route,
                t.p50,
                t.p90,
                t.p99,
                t.ratio_p50,
                t.throughput,
                t.ratio_throughput,
            ]
            for t in self.timings
        ]


COLUMNS = [
    "variant",
    "precision",
    "route",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "speedup vs torch (p50)",
    "seq/s at batch 8",
    "throughput vs torch",
]


def fixed_length_inputs(batch: int, sequence: int = SEQUENCE) -> dict[str, np.ndarray]:
    """``batch`` held-out BBC texts cut to exactly ``sequence`` tokens (no padding)."""
    from inference_pipeline.tokenization import TextTokenizer
    from phase01_common.bbc_news import load_bbc_news

    tokenizer = TextTokenizer.from_checkpoint()
    texts = [t for t in load_bbc_news().dev_texts if tokenizer.token_count(t) >= sequence]
    encoded = tokenizer.encode(texts[:batch])
    ids = encoded["input_ids"][:, :sequence].copy()
    ids[:, -1] = encoded["input_ids"][0, tokenizer.token_count(texts[0]) - 1]  # keep [SEP]
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def _interleaved(runners: dict, batch: dict, rounds: int, progress) -> dict[str, np.ndarray]:
    """Milliseconds per call, timed in rounds that call every runner once in turn: load from
    other processes then hits every variant alike instead of whichever ran during a spike."""
    for run in runners.values():  # warm-up (first-call allocations, ORT arena growth)
        for _ in range(3):
            run(batch)
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for index in range(rounds):
        for name, run in runners.items():
            start = time.perf_counter()
            run(batch)
            samples[name].append((time.perf_counter() - start) * 1e3)
        if (index + 1) % 10 == 0 or index + 1 == rounds:
            progress(f"  round {index + 1}/{rounds}")
    return {name: np.asarray(values) for name, values in samples.items()}


def run_bench(repo: Path, threads: int, iterations: int, progress=print) -> BenchResult:
    """Time torch eager and every promoted variant of ``repo``."""
    import onnxruntime as ort
    import torch
    from inference_pipeline.model import FineTuneConfig, load_or_train, torch_outputs
    from inference_pipeline.pipeline import manifest_recipe
    from inference_pipeline.repository import load_model_folder, read_manifest
    from inference_pipeline.runtime import make_session, session_runner

    manifest = read_manifest(repo)
    entries = [v for v in manifest["variants"] if v.get("promoted")]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        # A GPU speed path (FP16: CPU kernels upcast) says nothing on a CPU. Gated, not timed.
        skipped = [v["name"] for v in entries if not manifest_recipe(v).timed_on_cpu]
        entries = [v for v in entries if v["name"] not in skipped]
        if skipped:
            progress(f"not timed on CPU (a GPU speed path): {', '.join(skipped)}")
    folders = {v["name"]: load_model_folder(repo / v["name"]) for v in entries}
    torch.set_num_threads(threads)
    trained = load_or_train(FineTuneConfig(**manifest["train_settings"]), progress=progress)
    eager = trained.classifier("sdpa")
    inputs = {"one": fixed_length_inputs(1), "eight": fixed_length_inputs(THROUGHPUT_BATCH)}
    result = BenchResult(threads, iterations)

    def torch_runner(batch):
        return torch_outputs(eager, batch)

    runners = {"torch eager (SDPA)": torch_runner}
    for entry in entries:
        session = make_session(folders[entry["name"]].onnx_path, threads)
        runners[entry["name"]] = session_runner(session)
    progress(
        f"batch 1: {iterations} interleaved rounds over {len(runners)} models, {threads} threads"
    )
    latency = _interleaved(runners, inputs["one"], iterations, progress)
    rounds = max(3, iterations // 5)
    progress(f"batch {THROUGHPUT_BATCH}: {rounds} interleaved rounds")
    batched = _interleaved(runners, inputs["eight"], rounds, progress)
    kinds = {e["name"]: (e["precision"], e["route"]) for e in entries}
    for name in runners:
        p50, p90, p99 = np.percentile(latency[name], [50, 90, 99])
        kind, route = kinds.get(name, ("torch", "-"))
        throughput = THROUGHPUT_BATCH * 1e3 / float(np.median(batched[name]))
        result.timings.append(Timing(name, kind, route, p50, p90, p99, throughput))
    half = iterations // 2
    torch_ms = latency["torch eager (SDPA)"]
    result.torch_p50_first_last = (
        float(np.median(torch_ms[: max(half, 1)])),
        float(np.median(torch_ms[half:])),
    )
    baseline = result.timings[0]
    for timing in result.timings:
        timing.ratio_p50 = baseline.p50 / timing.p50
        timing.ratio_throughput = timing.throughput / baseline.throughput
    _targets(result)
    return result


def _targets(result: BenchResult) -> None:
    onnx_timings = [t for t in result.timings if t.kind != "torch"]
    if not onnx_timings:
        return
    best = max(onnx_timings, key=lambda t: t.ratio_p50)
    result.best_speedup = (best.name, best.ratio_p50)
    int8 = [t for t in onnx_timings if t.kind == "int8"]
    for candidate in sorted(int8, key=lambda t: t.p50):
        fp32 = [t for t in onnx_timings if t.kind == "fp32" and t.route == candidate.route]
        plain = [t for t in fp32 if not t.name.endswith("_fused")] or fp32
        if plain:
            result.int8_vs_fp32 = (
                f"{candidate.name} vs {plain[0].name}",
                plain[0].p50 / candidate.p50,
            )
            break


def format_table(result: BenchResult) -> str:
    lines = [
        f"{'variant':34} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'x torch':>8} "
        f"{'seq/s b8':>9} {'x torch':>8}"
    ]
    for t in result.timings:
        lines.append(
            f"{t.name:34} {t.p50:8.1f} {t.p90:8.1f} {t.p99:8.1f} {t.ratio_p50:8.2f} "
            f"{t.throughput:9.1f} {t.ratio_throughput:8.2f}"
        )
    first, last = result.torch_p50_first_last
    lines.append(
        f"threads: {result.threads} (torch intra-op and ONNX Runtime intra-op); "
        f"{result.iterations} timed runs per latency figure; "
        f"batch 1 and batch 8 at sequence {SEQUENCE}"
    )
    lines.append(
        f"torch eager p50, first/second half of rounds: {first:.1f} / {last:.1f} ms (load drift)"
    )
    name, value = result.best_speedup
    verdict = "met" if value >= SPEEDUP_TARGET else "missed"
    lines.append(
        f"best promoted variant vs torch eager: {name} {value:.2f}x "
        f"(target >= {SPEEDUP_TARGET}x: {verdict})"
    )
    name, value = result.int8_vs_fp32
    if name:
        verdict = "met" if value >= INT8_TARGET else "missed"
        lines.append(
            f"best INT8 vs ORT FP32 of the same export: {name} {value:.2f}x "
            f"(target >= {INT8_TARGET}x: {verdict})"
        )
    else:
        lines.append("best INT8 vs ORT FP32: no INT8 variant was promoted (see manifest gates)")
    return "\n".join(lines)


# Bar colours in the recipe table's precision order (fp32, int8, fp16, then any new one).
PALETTE = ("tab:blue", "tab:green", "tab:orange", "tab:red", "tab:purple", "tab:brown",
           "tab:pink", "tab:olive", "tab:cyan")  # fmt: skip


def precision_colour(precision: str) -> str:
    """Gray for torch; a precision the recipe table does not know gets the next colour."""
    from inference_pipeline.quantize import precision_order

    if precision == "torch":
        return "tab:gray"
    order = precision_order()
    index = order.index(precision) if precision in order else len(order)
    return PALETTE[index % len(PALETTE)]


def plot(result: BenchResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [t.name.replace("bbc_minilm_", "") for t in result.timings]
    p50 = np.array([t.p50 for t in result.timings])
    p99 = np.array([t.p99 for t in result.timings])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = [precision_colour(t.kind) for t in result.timings]
    left.barh(names, p50, color=colors, label="p50")
    left.errorbar(
        p50, names, xerr=[np.zeros_like(p50), p99 - p50], fmt="none", ecolor="black", capsize=3
    )
    left.set_xlabel(f"latency ms, batch 1, seq {SEQUENCE} (bar p50, whisker p99)")
    left.invert_yaxis()
    right.barh(names, [t.throughput for t in result.timings], color=colors)
    right.set_xlabel(f"sequences/s at batch {THROUGHPUT_BATCH}, seq {SEQUENCE}")
    right.invert_yaxis()
    right.set_yticklabels([])
    fig.suptitle(f"MiniLM BBC classifier, CPU, intra-op threads: {result.threads} (shared machine)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(args: argparse.Namespace | None = None) -> int:
    from inference_pipeline.repository import RepositoryError

    if args is None:
        parser = argparse.ArgumentParser(prog="inference_pipeline bench")
        parser.add_argument("repository", nargs="?")
        parser.add_argument("--threads", type=int, default=2)
        parser.add_argument("--iterations", type=int, default=100)
        parser.add_argument("--quick", action="store_true")
        parser.add_argument("--plot")
        args = parser.parse_args()
    if args.threads < 1 or args.iterations < 1:
        print("error: --threads and --iterations must be at least 1", file=sys.stderr)
        return 2
    if args.repository and not Path(args.repository).is_dir():
        print(f"error: {args.repository}: no such model repository folder", file=sys.stderr)
        return 2
    if args.repository:
        repo = Path(args.repository)
    else:  # the full build, cached under its settings + code key (shared with `make demo`)
        from inference_pipeline.pipeline import build_cached

        repo = build_cached().repository
    iterations = 20 if args.quick else args.iterations
    try:
        result = run_bench(repo, args.threads, iterations)
    except RepositoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_table(result))
    png = plot(result, Path(args.plot) if args.plot else repo.parent / "bench_latency.png")
    (png.with_suffix(".json")).write_text(json.dumps(asdict(result), indent=2))
    print(f"plot: {png}\ntable: {png.with_suffix('.json')}")
    return 0
