"""Continuous versus static batching under a closed-loop load (not a test).

``python -m inference_pipeline_harness.generation_bench [--quick] [--out DIR]``, or through the
pipeline's ``bench --generation``. Each of C clients sends its requests one after another
(closed loop); both engines serve the identical workload (same prompts, same long-tailed output
lengths), timed in the same run. Reported per engine and concurrency: generated tokens/s,
requests/s, time to first token and inter-token latency p50/p90/p99.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from inference_pipeline.generation.engine import (
    ContinuousBatchingEngine,
    EngineRunner,
    StaticBatchingEngine,
)
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.runtime import StepFunction
from phase01_common.stats import percentiles

# Output lengths are long-tailed, as in chat/completion traffic: most answers are short, a few
# run long. Static batching pays for every batch's longest; continuous batching does not.
OUTPUT_LENGTHS = (8, 16, 32, 64, 128, 192)
OUTPUT_WEIGHTS = (0.25, 0.25, 0.2, 0.15, 0.1, 0.05)
PROMPT_BYTES = (16, 48)


@dataclass
class RunResult:
    engine: str
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    tokens_per_s: float
    requests_per_s: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    itl_p99_ms: float
    # KV-cache slots held at the peak, as a share of one max-length cache per batch slot
    cache_peak_share: float


def workload(
    text: np.ndarray, count: int, max_positions: int, seed: int = 0
) -> list[GenerationRequest]:
    """Held-out prompts of 16-47 bytes; output lengths drawn from OUTPUT_LENGTHS (clipped to the
    model's context)."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice(OUTPUT_LENGTHS, size=count, p=OUTPUT_WEIGHTS)
    requests = []
    for n in lengths:
        size = int(rng.integers(*PROMPT_BYTES))
        start = int(rng.integers(0, len(text) - size))
        prompt = bytes(text[start : start + size])
        requests.append(GenerationRequest(prompt, int(min(n, max_positions - size))))
    return requests


def _summarize(
    engine, concurrency: int, seconds: float, ttfts: list[float], gaps: list[float], tokens: int
) -> RunResult:
    ttft = percentiles(ttfts, (50, 90, 99), scale=1e3)
    itl = percentiles(gaps, (50, 90, 99), scale=1e3)
    # KV slots held at the peak against one max_positions-long contiguous cache per batch slot
    if isinstance(engine, ContinuousBatchingEngine):
        held = engine.cache.peak_used_blocks * engine.cache.block_size
    else:  # every row of a static batch is as long as the batch's longest
        held = concurrency * engine.peak_width
    share = held / (concurrency * engine.config.max_positions)
    return RunResult(
        type(engine).__name__.replace("BatchingEngine", "").lower(),
        concurrency, len(ttfts), tokens, round(seconds, 2),
        tokens / seconds, len(ttfts) / seconds,
        *ttft.values(),
        *itl.values(),
        share,
    )  # fmt: skip


def _closed_loop(concurrency: int, requests: list, one: Callable[[object], None]) -> float:
    """C client threads share the request list; each waits for its answer before the next.
    Returns the wall time; a failed request fails the run (not lost in a thread)."""
    errors, lock = [], threading.Lock()
    todo = iter(requests)

    def client() -> None:
        while True:
            with lock:
                request = next(todo, None)
            if request is None:
                return
            try:
                one(request)
            except Exception as exc:
                errors.append(exc)
                return

    start = time.perf_counter()
    clients = [threading.Thread(target=client) for _ in range(concurrency)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed; first: {errors[0]!r}")
    return time.perf_counter() - start


def run_load(
    engine: ContinuousBatchingEngine | StaticBatchingEngine,
    requests: list[GenerationRequest],
    concurrency: int,
) -> RunResult:
    """In process: clients call the engine directly (timings from the engine's handles)."""
    runner = EngineRunner(engine).start()
    handles = []

    def one(request: GenerationRequest) -> None:
        handle = engine.submit(request)
        handle.wait()
        handles.append(handle)

    seconds = _closed_loop(concurrency, requests, one)
    runner.stop()
    timings = [h.timings() for h in handles]
    gaps = [g for _, gs in timings for g in gs]
    tokens = sum(len(h.tokens) for h in handles)
    return _summarize(engine, concurrency, seconds, [t for t, _ in timings], gaps, tokens)


def run_load_http(
    engine: ContinuousBatchingEngine | StaticBatchingEngine,
    requests: list[GenerationRequest],
    concurrency: int,
) -> RunResult:
    """Over HTTP: the engine mounted in the v2 server on loopback, clients stream SSE through
    the load generator's closed loop (``loadtest --generate`` measures the same way); TTFT and
    ITL are taken when each event arrives at the client."""
    import asyncio

    from inference_pipeline.generation.routes import GenerationService
    from inference_pipeline.loadtest.generation import token_timings
    from inference_pipeline.loadtest.generator import closed_loop_samples

    from inference_pipeline_harness.serving_fixtures import threaded_server

    service = GenerationService(engine, "bbc_gpt")
    bodies = []
    for r in requests:
        prompt = r.prompt.decode("utf-8", "replace")  # may grow: a replacement is 3 bytes
        budget = engine.config.max_positions - len(prompt.encode())
        params = {"max_tokens": min(r.max_new_tokens, budget)}
        bodies.append(json.dumps({"text_input": prompt, "parameters": params}).encode())
    with threaded_server([], generation=(service,)) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        start = time.perf_counter()
        samples, _ = asyncio.run(
            closed_loop_samples(host, int(port), "/v2/models/bbc_gpt/generate_stream", bodies,
                                concurrency, 3600.0, len(bodies), 0.0, 600.0, stream=True)
        )  # fmt: skip
        seconds = time.perf_counter() - start
    failed = [s.status for s in samples if s.status != 200]
    if failed:
        raise RuntimeError(f"{len(failed)} streams failed; statuses {sorted(set(failed))}")
    ttfts, gaps = token_timings(samples)
    return _summarize(
        engine, concurrency, seconds, ttfts, gaps, sum(len(s.arrivals) for s in samples)
    )


def make_engine(kind: str, step: StepFunction, concurrency: int):
    if kind == "continuous":
        return ContinuousBatchingEngine(step, max_batch=concurrency, prefill_chunk=32)
    return StaticBatchingEngine(step, batch_size=concurrency, max_wait_s=0.05)


def median_result(runs: list[RunResult]) -> RunResult:
    """Field-wise median over rounds (the machine is shared: single runs are noisy)."""
    fields = {}
    for name, value in asdict(runs[0]).items():
        if isinstance(value, float):
            fields[name] = float(np.median([getattr(r, name) for r in runs]))
        else:
            fields[name] = value
    return RunResult(**fields)


def benchmark(
    step: StepFunction,
    text: np.ndarray,
    concurrencies: list[int],
    requests_per_client: int,
    rounds: int = 1,
    progress=print,
    over_http: bool = False,
) -> list[RunResult]:
    """Per concurrency, ``rounds`` alternating static/continuous runs of the same workload;
    returns the field-wise median per engine."""
    results = []
    for concurrency in concurrencies:
        count = concurrency * requests_per_client
        requests = workload(text, count, step.config.max_positions, seed=concurrency)
        runs: dict[str, list[RunResult]] = {"static": [], "continuous": []}
        for round_index in range(rounds):
            for kind in runs:
                load = run_load_http if over_http else run_load
                result = load(make_engine(kind, step, concurrency), requests, concurrency)
                progress(
                    f"  round {round_index + 1}/{rounds} {kind:10s} C={concurrency:2d}: "
                    f"{result.tokens_per_s:7.1f} tok/s  TTFT p50 {result.ttft_p50_ms:7.1f} ms  "
                    f"ITL p50/p99 {result.itl_p50_ms:6.1f}/{result.itl_p99_ms:6.1f} ms  "
                    f"({result.seconds:.1f} s)"
                )
                runs[kind].append(result)
        results += [median_result(r) for r in runs.values()]
    return results


def verdict(results: list[RunResult], concurrency: int = 16) -> dict[str, float | bool]:
    """The issue's target at concurrency 16: >= 2x tokens/s at an equal or lower p99 ITL."""
    by = {(r.engine, r.concurrency): r for r in results}
    static, continuous = by[("static", concurrency)], by[("continuous", concurrency)]
    speedup = continuous.tokens_per_s / static.tokens_per_s
    itl_ratio = continuous.itl_p99_ms / static.itl_p99_ms
    return {
        "concurrency": concurrency,
        "tokens_per_s_speedup": speedup,
        "itl_p99_ratio": itl_ratio,
        "target_met": speedup >= 2.0 and itl_ratio <= 1.0,
    }


def plot(results: list[RunResult], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for kind, style in (("static", "o--"), ("continuous", "s-")):
        rows = sorted((r for r in results if r.engine == kind), key=lambda r: r.concurrency)
        xs = [r.concurrency for r in rows]
        axes[0].plot(xs, [r.tokens_per_s for r in rows], style, label=kind)
        axes[1].plot(xs, [r.ttft_p50_ms for r in rows], style, label=f"{kind} p50")
        axes[1].plot(xs, [r.ttft_p99_ms for r in rows], style, alpha=0.5, label=f"{kind} p99")
        axes[2].plot(xs, [r.itl_p50_ms for r in rows], style, label=f"{kind} p50")
        axes[2].plot(xs, [r.itl_p99_ms for r in rows], style, alpha=0.5, label=f"{kind} p99")
    titles = ("generated tokens/s", "time to first token (ms)", "inter-token latency (ms)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("concurrent clients")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[1].set_yscale("log")
    fig.suptitle(
        "Continuous vs static batching, byte-level GPT on ONNX Runtime (shared 2-core CPU)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="generation_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="concurrency 16 only, fewer requests")
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated client counts")
    parser.add_argument("--requests-per-client", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--int8", action="store_true", help="serve the INT8 graph")
    parser.add_argument(
        "--http", action="store_true", help="through the SSE route on a loopback uvicorn"
    )
    parser.add_argument("--out", type=Path, default=Path("report/generation"))
    args = parser.parse_args(argv)
    try:
        concurrencies = [int(c) for c in args.concurrency.split(",")]
        if (
            not concurrencies
            or min(concurrencies) < 1
            or min(args.requests_per_client, args.rounds) < 1
        ):
            raise ValueError
    except ValueError:
        print(
            "error: --concurrency needs positive integers (e.g. 1,4,16); "
            "--requests-per-client and --rounds must be >= 1",
            file=sys.stderr,
        )
        return 2
    if args.quick:
        concurrencies, args.requests_per_client, args.rounds = [16], 3, 1
    if 16 not in concurrencies:
        concurrencies.append(16)  # the target is stated at 16

    from inference_pipeline.generation.artifacts import load_artifacts
    from inference_pipeline.generation.runtime import OrtStep
    from inference_pipeline.generation.train import corpus_bytes

    artifacts = load_artifacts()
    path = artifacts.files.onnx_int8 if args.int8 else artifacts.files.onnx_fp32
    step = OrtStep(path, artifacts.model.config, threads=args.threads)
    _, held_out = corpus_bytes()
    print(
        f"generation bench: {path.name}, concurrency {concurrencies}, "
        f"{args.requests_per_client} requests per client, output lengths {OUTPUT_LENGTHS}"
    )
    results = benchmark(
        step,
        held_out,
        sorted(set(concurrencies)),
        args.requests_per_client,
        args.rounds,
        over_http=args.http,
    )
    summary = verdict(results)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "_http" if args.http else ""
    figure = plot(results, args.out / f"generation_batching{suffix}.png")
    report = {
        "model": str(path),
        "machine": "shared 2-core CPU (other jobs running; compare ratios, not absolutes)",
        "output_lengths": dict(zip(map(str, OUTPUT_LENGTHS), OUTPUT_WEIGHTS, strict=True)),
        "rounds": args.rounds,
        "transport": "HTTP SSE, loopback uvicorn" if args.http else "in process",
        "results (median of rounds)": [asdict(r) for r in results],
        "verdict": summary,
    }
    (args.out / f"generation_bench{suffix}.json").write_text(json.dumps(report, indent=2))
    print(
        f"continuous/static at C=16: {summary['tokens_per_s_speedup']:.2f}x tokens/s, "
        f"p99 ITL ratio {summary['itl_p99_ratio']:.2f} -> target "
        f"{'met' if summary['target_met'] else 'missed'}; plot {figure}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
