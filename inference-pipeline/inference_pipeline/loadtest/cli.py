"""`python -m inference_pipeline loadtest`: run the levels, print progress and the table."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from inference_pipeline.loadtest.client import LoopbackOnlyError, loopback_address
from inference_pipeline.loadtest.generation import (
    COMPLETIONS_PATH,
    GenerationLevelResult,
    ServiceLevel,
    format_generation_table,
    generation_bodies,
    plot_generation,
    progress_line,
    summarize_generation,
)
from inference_pipeline.loadtest.generator import (
    LevelResult,
    closed_loop,
    closed_loop_samples,
    open_loop,
    request_bodies,
)
from inference_pipeline.loadtest.report import (
    format_table,
    plot_latency_vs_throughput,
    write_json,
)

MAX_DURATION_S = 120.0
MAX_CONCURRENCY = 1024
DEFAULT_TEXTS = (
    "Shares in the bank rose after profits beat forecasts",
    "The film won three awards at the ceremony on Sunday night",
    "Ministers face a vote on the new tax plans next week",
    "The striker scored twice as the team reached the cup final",
    "A new phone chip promises longer battery life for users",
    "Oil prices fell as the cartel agreed to raise output from next month",
    "The band's album went straight to the top of the charts",
    "Election campaign enters its final week with the parties level in the polls",
)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def load_texts(path: str | None) -> list[str]:
    if path is None:
        return list(DEFAULT_TEXTS)
    texts = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"{path}: no texts (one per line expected)")
    return texts


def run_levels(
    url: str, model: str, texts: list[str], concurrency: list[int] | None = None,
    rates: list[float] | None = None, duration_s: float = 5.0, max_requests: int = 20000,
    warmup_s: float = 0.5, batch: int = 1, timeout_s: float = 10.0, seed: int = 0,
    progress: bool = True,
) -> list[LevelResult]:  # fmt: skip
    """Run every level against ``url`` (loopback only) and return their results."""
    host, port = loopback_address(url)
    path = f"/v2/models/{model}/infer"
    bodies = request_bodies(texts, batch)
    plan = [("concurrency", c) for c in concurrency or []] + [("rate", r) for r in rates or []]
    results = []
    for mode, level in plan:
        if mode == "concurrency":
            run = closed_loop(host, port, path, bodies, int(level), duration_s, max_requests,
                              warmup_s, timeout_s)  # fmt: skip
        else:
            run = open_loop(host, port, path, bodies, float(level), duration_s, max_requests,
                            warmup_s, timeout_s, seed)  # fmt: skip
        result = asyncio.run(run)
        results.append(result)
        if progress:
            p99 = result.latency_ms.get("p99", float("nan"))
            print(
                f"[loadtest] {mode} {level:g}: {result.throughput:.1f} answers/s, "
                f"p99 {p99:.2f} ms, {result.rejects} rejects, {result.errors} errors",
                file=sys.stderr,
                flush=True,
            )
    return results


def run_generation_levels(
    url: str, model: str, prompts: list[str], concurrency: list[int], duration_s: float = 5.0,
    max_requests: int = 20000, warmup_s: float = 0.5, max_tokens: int = 32,
    timeout_s: float = 60.0, progress: bool = True, slo: ServiceLevel | None = None,
) -> list[GenerationLevelResult]:  # fmt: skip
    """The closed-loop sweep against ``url``'s OpenAI ``/v1/completions`` (loopback only)."""
    host, port = loopback_address(url)
    path = COMPLETIONS_PATH
    bodies = generation_bodies(model, prompts, max_tokens)
    results = []
    for level in concurrency:
        samples, window = asyncio.run(
            closed_loop_samples(
                host,
                port,
                path,
                bodies,
                level,
                duration_s,
                max_requests,
                warmup_s,
                timeout_s,
                stream=True,
            )  # fmt: skip
        )
        results.append(summarize_generation(level, samples, window, slo))
        if progress:
            progress_line(results[-1])
    return results


def _run_generate(args: argparse.Namespace, prompts: list[str]) -> int:
    if args.rate:
        return _fail("--generate sweeps --concurrency (closed loop); --rate is for infer")
    if args.max_tokens < 1:
        return _fail("--max-tokens must be >= 1")
    if min(args.slo_ttft_ms, args.slo_tpot_ms) <= 0:
        return _fail("--slo-ttft-ms and --slo-tpot-ms must be positive")
    results = run_generation_levels(
        args.url, args.model, prompts, args.concurrency, args.duration, args.max_requests,
        args.warmup, args.max_tokens, args.timeout,
        slo=ServiceLevel(args.slo_ttft_ms, args.slo_tpot_ms),
    )  # fmt: skip
    print(format_generation_table(results))
    if all(r.successes == 0 for r in results):
        return _fail(f"no stream succeeded against {args.url} (is {args.model!r} a GPT here?)")
    if args.json_path:
        settings = {k: v for k, v in vars(args).items() if k != "run"}
        write_json(Path(args.json_path), results, settings)
    if args.plot_path:
        title = f"{args.model}: streamed generation vs concurrency (loopback)"
        plot_generation(Path(args.plot_path), results, title)
    return 0


def run(args: argparse.Namespace) -> int:
    if not args.concurrency and not args.rate:
        args.concurrency = [1, 2, 4, 8, 16, 32]
    if not 0 < args.duration <= MAX_DURATION_S:
        return _fail(f"--duration must be in (0, {MAX_DURATION_S:g}] seconds")
    if args.concurrency and max(args.concurrency) > MAX_CONCURRENCY:
        return _fail(f"--concurrency above {MAX_CONCURRENCY} is refused")
    if args.rate and min(args.rate) <= 0:
        return _fail("--rate must be positive")
    if args.max_requests < 1 or args.batch < 1 or args.warmup < 0:
        return _fail("--max-requests and --batch must be >= 1, --warmup >= 0")
    try:
        loopback_address(args.url)
        texts = load_texts(args.texts)
    except (LoopbackOnlyError, OSError, ValueError) as exc:
        return _fail(str(exc))
    if args.generate:
        return _run_generate(args, texts)
    results = run_levels(
        args.url, args.model, texts, args.concurrency, args.rate, args.duration,
        args.max_requests, args.warmup, args.batch, args.timeout, args.seed,
    )  # fmt: skip
    print(format_table(results))
    if all(r.successes == 0 for r in results):
        return _fail(f"no request succeeded against {args.url} (is model {args.model!r} served?)")
    settings = {k: v for k, v in vars(args).items() if k != "run"}
    if args.json_path:
        write_json(Path(args.json_path), results, settings)
    if args.plot_path:
        plot_latency_vs_throughput(Path(args.plot_path), {args.model: results})
    return 0
