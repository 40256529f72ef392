"""`python -m inference_pipeline bench [DIR/model_repository]`: every variant timed in one run.

Latency p50/p90/p99 at batch 1, sequence 128, and throughput at batch 8, sequence 128, for
torch eager (SDPA attention, the baseline), OpenVINO with its default settings on our FP32
export (what a user gets from ``compile_model("model.onnx")``: the peer to beat) and each
promoted variant on its runtime (ONNX Runtime or OpenVINO), with ratios to torch eager and
the runtime x precision table (ratios to OpenVINO's default). The models are timed in
interleaved rounds (each round calls every model once, ``runtime.interleaved_ms``), so load
from other processes on a shared machine hits all of them alike; the baseline's median over
the first and the second half of the rounds shows how much the load drifted. Every figure
states its thread count (default 1, as the build's promotion times them).

Without a repository argument the full build is made (once per settings + code key) under
``~/.cache/inference_pipeline/builds/``, so ``make bench`` works on a fresh clone.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from phase01_common.stats import percentiles

SEQUENCE = 128
THROUGHPUT_BATCH = 8
SPEEDUP_TARGET = 3.0  # best promoted variant vs torch eager, batch 1
INT8_TARGET = 1.5  # best ONNX Runtime INT8 vs ONNX Runtime FP32 of the same export
DEFAULT_VS_OPENVINO_TARGET = 1.5  # the promoted default vs OpenVINO's default, batch 1 and 8
OPENVINO_DEFAULT = "OpenVINO default (FP32 export)"
TORCH = "torch eager (SDPA)"


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
    runtime: str = "torch"  # torch / onnxruntime / openvino
    batch8_ms: float = float("nan")  # median ms per batch of 8


@dataclass
class BenchResult:
    threads: int
    iterations: int
    pinning: bool = True  # OpenVINO's CPU pinning, the peer's and our rows' alike
    timings: list[Timing] = field(default_factory=list)
    torch_p50_first_last: tuple[float, float] = (float("nan"), float("nan"))
    best_speedup: tuple[str, float] = ("", float("nan"))
    int8_vs_fp32: tuple[str, float] = ("", float("nan"))
    default_variant: dict = field(default_factory=dict)  # the manifest's record
    # batch size -> (default variant, its speedup over OpenVINO's default, the fastest other
    # variant, its median / the default's median)
    default_vs: dict[str, tuple[str, float, str, float]] = field(default_factory=dict)

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


# `bench --quick`: a smoke run (every variant timed a few times), not figures to quote.
QUICK_ITERATIONS = 6


def run_bench(
    repo: Path,
    threads: int,
    iterations: int,
    progress=print,
    pinning: bool = True,
    batch8_rounds: int | None = None,
    warmup: int = 3,
) -> BenchResult:
    """Time torch eager and every promoted variant of ``repo``; OpenVINO's default and our
    OpenVINO rows all run with the same threading knobs (``openvino_runtime.threading_settings``),
    ``pinning`` included (True: OpenVINO's default). Batch 8 gets ``batch8_rounds`` rounds
    (default: a fifth of ``iterations``, at least 3); every model gets ``warmup`` untimed calls
    at each batch size first."""
    import onnxruntime as ort
    import torch
    from inference_pipeline.model import FineTuneConfig, load_or_train, torch_outputs
    from inference_pipeline.pipeline import manifest_recipe, variant_runner
    from inference_pipeline.repository import load_model_folder, read_manifest
    from inference_pipeline.runtime import interleaved_ms

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
    result = BenchResult(threads, iterations, pinning=pinning)

    def torch_runner(batch):
        return torch_outputs(eager, batch)

    runners = {TORCH: torch_runner}
    kinds = {TORCH: ("torch", "-", "torch")}
    fp32 = next((e for e in entries if e["recipe"] == "fp32"), None)
    if fp32 is not None:  # no OpenVINO settings at all: its defaults on this CPU
        runners[OPENVINO_DEFAULT] = variant_runner(
            "openvino", folders[fp32["name"]].onnx_path, threads, {}, pinning
        )
        kinds[OPENVINO_DEFAULT] = ("default", "torchscript", "openvino")
    for entry in entries:
        folder = folders[entry["name"]]
        parameters = {k: v.string_value for k, v in folder.config.parameters.items()}
        platform = folder.config.platform or folder.config.backend
        runners[entry["name"]] = variant_runner(
            platform, folder.onnx_path, threads, parameters, pinning
        )
        kinds[entry["name"]] = (
            entry["precision"],
            entry["route"],
            entry.get("runtime", "onnxruntime"),
        )
    progress(
        f"batch 1: {iterations} interleaved rounds over {len(runners)} models, {threads} threads"
    )
    latency = interleaved_ms(runners, inputs["one"], iterations, warmup, progress=progress)
    rounds = batch8_rounds or max(3, iterations // 5)
    progress(f"batch {THROUGHPUT_BATCH}: {rounds} interleaved rounds")
    batched = interleaved_ms(runners, inputs["eight"], rounds, warmup, progress=progress)
    for name in runners:
        p50, p90, p99 = percentiles(latency[name]).values()
        kind, route, runtime = kinds[name]
        batch8 = float(np.median(batched[name]))
        throughput = THROUGHPUT_BATCH * 1e3 / batch8
        result.timings.append(
            Timing(name, kind, route, p50, p90, p99, throughput, runtime=runtime, batch8_ms=batch8)
        )
    result.default_variant = manifest.get("default_variant", {})
    half = iterations // 2
    torch_ms = latency[TORCH]
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
    onnx_timings = [t for t in result.timings if t.runtime != "torch" and t.kind != "default"]
    if not onnx_timings:
        return
    best = max(onnx_timings, key=lambda t: t.ratio_p50)
    result.best_speedup = (best.name, best.ratio_p50)
    _default_targets(result, onnx_timings)
    onnx_timings = [t for t in onnx_timings if t.runtime == "onnxruntime"]
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


def _default_targets(result: BenchResult, variants: list[Timing]) -> None:
    """The promoted default (the manifest's fastest at each batch) vs OpenVINO's default
    and vs the fastest other variant timed here."""
    by_name = {t.name: t for t in result.timings}
    peer = by_name.get(OPENVINO_DEFAULT)
    for batch, choice in result.default_variant.get("by_batch", {}).items():
        mine = by_name.get(choice["variant"])
        if mine is None or peer is None:
            continue
        ms = (lambda t: t.p50) if batch == "1" else (lambda t: t.batch8_ms)
        others = [t for t in variants if t.name != mine.name]
        fastest = min(others, key=ms) if others else mine
        result.default_vs[batch] = (
            mine.name,
            ms(peer) / ms(mine),
            fastest.name,
            ms(fastest) / ms(mine),
        )


def runtime_precision_table(result: BenchResult) -> str:
    """The runtime x precision table: median ms at batch 1 and per batch of 8, and the
    speedup over OpenVINO's default on our FP32 export."""
    by_name = {t.name: t for t in result.timings}
    peer = by_name.get(OPENVINO_DEFAULT)
    lines = [
        f"{'runtime':12} {'precision':9} {'variant':32} {'b1 ms':>7} {'b8 ms':>7} "
        f"{'x OV-def b1':>11} {'x OV-def b8':>11}"
    ]
    rows = [t for t in result.timings if t.runtime != "torch"]
    for t in sorted(rows, key=lambda t: (t.runtime, t.kind, t.p50)):
        b1 = peer.p50 / t.p50 if peer else float("nan")
        b8 = peer.batch8_ms / t.batch8_ms if peer else float("nan")
        name = t.name.replace("bbc_minilm_", "")
        lines.append(
            f"{t.runtime:12} {t.kind:9} {name:32} {t.p50:7.1f} {t.batch8_ms:7.1f} "
            f"{b1:11.2f} {b8:11.2f}"
        )
    return "\n".join(lines)


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
        f"threads: {result.threads} (torch, ONNX Runtime and OpenVINO intra-op; OpenVINO CPU "
        f"pinning {'on' if result.pinning else 'off'} for its default and our rows alike); "
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
    lines += ["", "runtime x precision (medians; OV-def = OpenVINO's default on our FP32 export):"]
    lines.append(runtime_precision_table(result))
    if not result.default_vs:
        lines.append("promoted default: none recorded in the manifest (or not timed here)")
    for batch, (name, vs_peer, other, vs_other) in sorted(result.default_vs.items()):
        verdict = "met" if vs_peer >= DEFAULT_VS_OPENVINO_TARGET else "missed"
        lines.append(
            f"promoted default at batch {batch}: {name} {vs_peer:.2f}x OpenVINO's default "
            f"(target >= {DEFAULT_VS_OPENVINO_TARGET}x: {verdict}); the fastest other "
            f"variant, {other}, takes {vs_other:.2f}x its time"
        )
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
        parser.add_argument("--threads", type=int, default=1)
        parser.add_argument("--iterations", type=int, default=100)
        parser.add_argument("--quick", action="store_true")
        parser.add_argument("--plot")
        parser.add_argument("--pinning", choices=("on", "off"), default="on")
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
    iterations = QUICK_ITERATIONS if args.quick else args.iterations
    try:
        result = run_bench(repo, args.threads, iterations, pinning=args.pinning == "on")
    except RepositoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_table(result))
    png = plot(result, Path(args.plot) if args.plot else repo.parent / "bench_latency.png")
    (png.with_suffix(".json")).write_text(json.dumps(asdict(result), indent=2))
    print(f"plot: {png}\ntable: {png.with_suffix('.json')}")
    return 0
