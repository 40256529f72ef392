"""Generation benchmarks under a closed-loop load (not a test).

``python -m inference_pipeline_harness.generation_bench [--quick] [--http] [--experiments
batching,prefix,memory,budget,passcost,steps] [--out DIR]``. Each of C clients sends its
requests one after another (closed loop); the compared configurations serve the identical
workload (same prompts, same long-tailed output lengths), interleaved in the same run, medians
over rounds. Reported as vLLM's benchmark_serving does: output tokens/s, requests/s, goodput
under the declared SLO, TTFT, TPOT, ITL and end-to-end latency (mean, median, p99).

- ``batching``: continuous vs static batching per concurrency (in process, or ``--http``
  through ``/v1/completions``, from clients in a process of their own): static with
  ``--threads`` and with 2 ONNX Runtime intra-op threads, continuous (the default: its passes
  side by side, the prefill pass across iterations), with every pass serial, and with one
  dense past (``--max-num-seqs``: also with fewer sequences running than clients); the target
  is checked against every static. ``--runs N`` repeats it N times (each run its own
  ``--rounds``) and says in how many runs each engine met the target: on a shared 2-core
  machine one run's verdict moves with the noise.
- ``prefix``: every prompt shares a 128-byte prefix; prefix caching off vs on (over HTTP,
  from the same clients' process), TTFT and the hit rate from ``/metrics`` against the
  workload's.
- ``memory``: the same KV pool, blocks on demand (with preemption) vs reserve-up-front:
  sequences running at the peak.
- ``budget``: the per-step token budget swept at C=16 (what the knob trades).
- ``passcost``: one 16-row decode pass against dense pasts of 50-250 positions.
- ``loopcost``: each engine's own cost per token boundary (scheduling, bookkeeping, writes,
  sampling, streaming, its threads' hand-offs) on the C=16 workload, queued at once, under a
  step function that costs nothing (``FreeStep``).
- ``steps``: the batching workload at C=16, the batching variants (and static with its past
  at full width from the first pass), every step-function call timed: the time from one
  iteration's first pass to the next's (what a running stream waits for its next token) split
  into the decode passes, the prefill pass, the time both ran at once and everything else
  (scheduling, cache writes, sampling), and the share and cost of iterations that carry a
  prefill chunk.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from inference_pipeline.generation.engine import (
    DEFAULT_ADMISSION_DELAY_FACTOR,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ContinuousBatchingEngine,
    EngineRunner,
    StaticBatchingEngine,
    blocks_for_sequences,
)
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.runtime import StepFunction
from inference_pipeline.generation.train import TrainSettings
from inference_pipeline.loadtest.generation import (
    ServiceLevel,
    completion_body,
    good_requests,
    latency_stats,
    replay_streams,
    token_timings,
)
from inference_pipeline.loadtest.generator import Sample

# Output lengths are long-tailed, as in chat/completion traffic: most answers are short, a few
# run long. Static batching pays for every batch's longest; continuous batching does not.
OUTPUT_LENGTHS = (8, 16, 32, 64, 128, 192)
OUTPUT_WEIGHTS = (0.25, 0.25, 0.2, 0.15, 0.1, 0.05)
PROMPT_BYTES = (16, 48)
SLO = ServiceLevel(ttft_ms=250.0, tpot_ms=25.0)  # the declared SLO goodput counts against
SHARED_PREFIX_BYTES = 128
# The demo's GPT, also the bench's default: half the command line's default budget
# (`train-gpt`, 1200 steps), so a first `make demo` trains it in about 3 minutes.
DEMO_TRAINING = TrainSettings(steps=600)
# The C=16 target: continuous at >= this many times static's tokens/s, at a p99 ITL no higher
# than static's (against every static variant of the run).
TARGET_TOKENS_PER_S_SPEEDUP = 2.0
TARGET_ITL_P99_RATIO = 1.0


class Variant(NamedTuple):
    """One compared engine: a ``make_engine`` kind on a step function, with the continuous
    scheduler's knobs (``budget`` None: the experiment's ``--budget``; ``max_num_seqs``
    None: the concurrency)."""

    kind: str
    step: StepFunction
    budget: int | None = None
    admission_delay_factor: float = DEFAULT_ADMISSION_DELAY_FACTOR
    max_num_seqs: int | None = None


@dataclass
class RunResult:
    engine: str
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    tokens_per_s: float
    requests_per_s: float
    goodput_rps: float  # requests/s meeting the SLO (TTFT and TPOT)
    ttft_mean_ms: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    tpot_mean_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    itl_mean_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    itl_p99_ms: float
    e2e_mean_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    # KV-cache slots held at the peak, as a share of one max-length cache per batch slot
    cache_peak_share: float
    peak_running: float  # sequences running at once, at the peak
    preemptions: float


def workload(
    text: np.ndarray, count: int, max_positions: int, seed: int = 0, prefix: bytes = b""
) -> list[GenerationRequest]:
    """Held-out prompts of 16-47 bytes (after ``prefix``, shared by all); output lengths drawn
    from OUTPUT_LENGTHS (clipped to the model's context)."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice(OUTPUT_LENGTHS, size=count, p=OUTPUT_WEIGHTS)
    requests = []
    for n in lengths:
        size = int(rng.integers(*PROMPT_BYTES))
        start = int(rng.integers(0, len(text) - size))
        prompt = prefix + bytes(text[start : start + size])
        requests.append(GenerationRequest(prompt, int(min(n, max_positions - len(prompt)))))
    return requests


def _summarize(
    engine, concurrency: int, seconds: float, samples: list[Sample], slo: ServiceLevel
) -> RunResult:
    timings = token_timings(samples)
    stats = {
        name: latency_stats(values)
        for name, values in (
            ("ttft", timings.ttft), ("tpot", timings.tpot), ("itl", timings.gaps),
            ("e2e", timings.e2e),
        )
    }  # fmt: skip
    # KV slots held at the peak against one max_positions-long contiguous cache per batch slot
    if isinstance(engine, ContinuousBatchingEngine):
        held = engine.cache.peak_used_blocks * engine.cache.block_size
        peak, preemptions = engine.scheduler.stats.peak_running, engine.scheduler.stats.preemptions
    else:  # every row of a static batch is as long as the batch's longest
        held = concurrency * engine.peak_width
        peak, preemptions = concurrency, 0
    share = held / (concurrency * engine.config.max_positions)
    tokens = sum(len(s.arrivals) for s in samples)
    name = type(engine).__name__.replace("BatchingEngine", "").lower()
    if isinstance(engine, ContinuousBatchingEngine) and engine.scheduler.reserve_up_front:
        name = "reserve-up-front"
    return RunResult(
        name, concurrency, len(samples), tokens, round(seconds, 2),
        tokens / seconds, len(samples) / seconds, good_requests(samples, slo) / seconds,
        *(stats["ttft"][k] for k in ("mean", "p50", "p90", "p99")),
        *(stats["tpot"].get(k, 0.0) for k in ("mean", "p50", "p99")),
        *(stats["itl"][k] for k in ("mean", "p50", "p90", "p99")),
        *(stats["e2e"][k] for k in ("mean", "p50", "p99")),
        share, float(peak), float(preemptions),
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
    slo: ServiceLevel = SLO,
) -> RunResult:
    """In process: clients call the engine directly (timings from the engine's handles).

    Like a server, the run keeps no request's objects once it is answered and takes every
    streamed chunk as soon as it is made (the listener, on the engine's thread): a chunk per
    token left in the handles' queues, and the finished handles, would pile up thousands of
    tracked objects per run, and with them the collector's pauses (0.15-0.2 ms a young
    collection, ~10 per run) inside the measured iterations, which a server's steady state,
    whose streams take their chunks, does not have."""
    runner = EngineRunner(engine).start()
    samples = []

    def one(request: GenerationRequest) -> None:
        handle = engine.submit(request)
        handle.listener = handle.chunks.get_nowait  # one call per chunk put
        handle.wait()
        samples.append(Sample(handle.submitted_at, handle.finished_at, 200, handle.token_times))

    seconds = _closed_loop(concurrency, requests, one)
    runner.stop()
    return _summarize(engine, concurrency, seconds, samples, slo)


class ClientProcess:
    """The HTTP load's clients in a process of their own (one, reused across runs), as a
    deployment's clients are: in the server's process they would share its GIL and its
    event loop's turns with the engine, and a chunk's parsing would count in the server's
    inter-token gaps. ``with ClientProcess() as clients: clients.replay(...)``."""

    def __init__(self) -> None:
        self._pool = futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def replay(
        self, host: str, port: int, bodies: list[bytes], concurrency: int
    ) -> tuple[list[Sample], float]:
        """``replay_streams`` in the client process: the samples and their window (s)."""
        return self._pool.submit(replay_streams, host, port, bodies, concurrency).result()

    def close(self) -> None:
        self._pool.shutdown()

    def __enter__(self) -> ClientProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_load_http(
    engine: ContinuousBatchingEngine | StaticBatchingEngine,
    requests: list[GenerationRequest],
    concurrency: int,
    clients: ClientProcess,
    slo: ServiceLevel = SLO,
    warmup: GenerationRequest | None = None,
    model: str = "bbc_gpt",
) -> tuple[RunResult, str]:
    """Over HTTP: the engine mounted in the v2 server on loopback, ``clients`` (in their own
    process) stream ``/v1/completions`` through the load generator's closed loop
    (``loadtest --generate`` measures the same way); TTFT and ITL are taken when each chunk
    arrives at the client, tokens/s over the clients' window. ``warmup`` is sent (and not
    measured) first. Returns the result and the /metrics text."""
    import urllib.request

    from inference_pipeline.generation.service import GenerationService

    from inference_pipeline_harness.serving_fixtures import threaded_server

    service = GenerationService(engine, model)

    def body(r: GenerationRequest) -> bytes:  # byte ids: the prompt's exact bytes
        return completion_body(model, list(r.prompt), r.max_new_tokens)

    bodies = [body(r) for r in requests]
    with threaded_server([], generation=(service,)) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        if warmup is not None:
            clients.replay(host, int(port), [body(warmup)], 1)
        samples, seconds = clients.replay(host, int(port), bodies, concurrency)
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
            metrics = response.read().decode()
    failed = [s.status for s in samples if s.status != 200]
    if failed:
        raise RuntimeError(f"{len(failed)} streams failed; statuses {sorted(set(failed))}")
    return _summarize(engine, concurrency, seconds, samples, slo), metrics


def make_engine(
    kind: str,
    step: StepFunction,
    concurrency: int,
    budget: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    num_blocks: int | None = None,
    prefix_caching: bool = True,
    admission_delay_factor: float = DEFAULT_ADMISSION_DELAY_FACTOR,
    max_num_seqs: int | None = None,
):
    """ "static", "continuous" (the engine's defaults: blocks on demand, the long rows' decode
    pass beside the short rows', the prefill pass on its worker across iterations),
    "continuous-serial" (the same, every pass one after another on the engine's thread,
    each iteration's prefill taken in within it), "reserve-up-front"
    (continuous, blocks for prompt + max_tokens taken at admission), "continuous-one-past"
    (continuous with every row in one dense past, padded to the longest: what the short/long
    split saves) or "static-full-width" (static whose past is the whole context from the
    first pass: no resize inside a batch, every pass at full width). The continuous engines
    run up to ``max_num_seqs`` sequences at once (default: ``concurrency``), their KV pool
    sized for ``concurrency`` full-context sequences either way."""
    if kind in ("static", "static-full-width"):
        grow = step.config.max_positions if kind == "static-full-width" else 32
        return StaticBatchingEngine(step, batch_size=concurrency, max_wait_s=0.05, grow=grow)
    seqs = max_num_seqs or concurrency
    return ContinuousBatchingEngine(
        step, max_num_seqs=seqs, max_num_batched_tokens=max(budget, seqs),
        num_blocks=num_blocks or blocks_for_sequences(step.config, concurrency),
        prefix_caching=prefix_caching,
        reserve_up_front=kind == "reserve-up-front",
        short_width=step.config.max_positions if kind == "continuous-one-past" else None,
        concurrent_passes=kind != "continuous-serial",
        admission_delay_factor=admission_delay_factor,
    )  # fmt: skip


def build_variant(variant: Variant, concurrency: int, budget: int):
    return make_engine(
        variant.kind, variant.step, concurrency, budget=variant.budget or budget,
        admission_delay_factor=variant.admission_delay_factor, max_num_seqs=variant.max_num_seqs,
    )  # fmt: skip


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
    budget: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    variants: dict[str, Variant] | None = None,
    clients: ClientProcess | None = None,
) -> list[RunResult]:
    """Per concurrency, ``rounds`` alternating runs of the same workload, one per variant
    (name -> ``Variant``; default static and continuous on ``step``; continuous at the token
    ``budget`` unless its variant names one); returns the field-wise median per variant,
    named as the variant. ``over_http`` sends the load from ``clients``."""
    if over_http and clients is None:
        raise ValueError("over_http needs the clients' process")
    variants = variants or {
        "static": Variant("static", step),
        "continuous": Variant("continuous", step),
    }
    results = []
    for concurrency in concurrencies:
        count = concurrency * requests_per_client
        requests = workload(text, count, step.config.max_positions, seed=concurrency)
        runs: dict[str, list[RunResult]] = {name: [] for name in variants}
        for round_index in range(rounds):
            for name, variant in variants.items():
                engine = build_variant(variant, concurrency, budget)
                if over_http:
                    result, _ = run_load_http(engine, requests, concurrency, clients)
                else:
                    result = run_load(engine, requests, concurrency)
                result.engine = name
                progress(
                    f"  round {round_index + 1}/{rounds} {name:20s} C={concurrency:2d}: "
                    f"{result.tokens_per_s:7.1f} tok/s  TTFT p50 {result.ttft_p50_ms:7.1f} ms  "
                    f"ITL p50/p99 {result.itl_p50_ms:6.1f}/{result.itl_p99_ms:6.1f} ms  "
                    f"({result.seconds:.1f} s)"
                )
                runs[name].append(result)
        results += [median_result(r) for r in runs.values()]
    return results


def metric_value(metrics: str, name: str, model: str) -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    head = f'{name}{{model_name="{model}"}} '
    for line in metrics.splitlines():
        if line.startswith(head):
            return float(line[len(head) :])
    return 0.0


def prefix_benchmark(
    step: StepFunction,
    text: np.ndarray,
    concurrency: int,
    requests_per_client: int,
    rounds: int,
    clients: ClientProcess,
    progress=print,
) -> dict:
    """Every prompt = one shared 128-byte prefix + 16-47 own bytes, over the OpenAI route:
    prefix caching off vs on, alternating rounds. The hit rate is read from /metrics and set
    against the workload's: each measured request can hit exactly the prefix's 8 blocks (one
    warm-up request, not measured, fills the cache first)."""
    prefix = bytes(text[:SHARED_PREFIX_BYTES])
    requests = workload(text[SHARED_PREFIX_BYTES:], concurrency * requests_per_client,
                        step.config.max_positions, seed=99, prefix=prefix)  # fmt: skip
    warmup = GenerationRequest(prefix + b" warm-up", 1)
    queried = len(warmup.prompt) + sum(len(r.prompt) for r in requests)
    expected = SHARED_PREFIX_BYTES * len(requests) / queried
    runs: dict[str, list[RunResult]] = {"off": [], "on": []}
    rates = []
    for round_index in range(rounds):
        for mode in runs:
            model = f"prefix_{mode}_{round_index}"  # the metrics are per model name
            engine = make_engine("continuous", step, concurrency, prefix_caching=mode == "on")
            result, metrics = run_load_http(engine, requests, concurrency, clients,
                                            warmup=warmup, model=model)  # fmt: skip
            if mode == "on":
                hits = metric_value(metrics, "vllm:prefix_cache_hits_total", model)
                asked = metric_value(metrics, "vllm:prefix_cache_queries_total", model)
                rates.append(hits / asked)
            progress(
                f"  prefix round {round_index + 1}/{rounds} caching {mode:3s}: "
                f"TTFT p50 {result.ttft_p50_ms:6.1f} ms, {result.tokens_per_s:7.1f} tok/s"
            )
            runs[mode].append(result)
    off, on = median_result(runs["off"]), median_result(runs["on"])
    return {
        "concurrency": concurrency,
        "off": asdict(off),
        "on": asdict(on),
        "ttft_p50_speedup": off.ttft_p50_ms / on.ttft_p50_ms,
        "hit_rate_metrics": float(np.median(rates)),
        "hit_rate_workload": expected,
    }


def memory_benchmark(
    step: StepFunction,
    text: np.ndarray,
    concurrency: int,
    requests_per_client: int,
    num_blocks: int,
    rounds: int,
    progress=print,
) -> dict:
    """The main workload in a KV pool of ``num_blocks`` blocks: blocks on demand (with
    preemption) vs reserve-up-front, alternating rounds; sequences running at the peak."""
    requests = workload(text, concurrency * requests_per_client, step.config.max_positions,
                        seed=concurrency)  # fmt: skip
    runs: dict[str, list[RunResult]] = {"reserve-up-front": [], "continuous": []}
    for round_index in range(rounds):
        for kind in runs:
            engine = make_engine(kind, step, concurrency, num_blocks=num_blocks)
            result = run_load(engine, requests, concurrency)
            progress(
                f"  memory round {round_index + 1}/{rounds} {kind:16s}: peak running "
                f"{result.peak_running:.0f}, {result.preemptions:.0f} preemptions, "
                f"{result.tokens_per_s:7.1f} tok/s"
            )
            runs[kind].append(result)
    upfront, on_demand = (median_result(r) for r in runs.values())
    return {
        "concurrency": concurrency,
        "num_blocks": num_blocks,
        "kv_slots": num_blocks * 16,
        "reserve_up_front": asdict(upfront),
        "on_demand": asdict(on_demand),
        "peak_running_ratio": on_demand.peak_running / upfront.peak_running,
    }


def budget_sweep(
    step: StepFunction,
    text: np.ndarray,
    concurrency: int,
    requests_per_client: int,
    budgets: list[int],
    rounds: int,
    progress=print,
) -> list[dict]:
    """Continuous batching at ``concurrency`` per token budget (max_num_batched_tokens),
    in process, alternating rounds: what the knob trades."""
    requests = workload(text, concurrency * requests_per_client, step.config.max_positions,
                        seed=concurrency)  # fmt: skip
    runs: dict[int, list[RunResult]] = {b: [] for b in budgets}
    for round_index in range(rounds):
        for budget in budgets:
            engine = make_engine("continuous", step, concurrency, budget=budget)
            result = run_load(engine, requests, concurrency)
            progress(
                f"  budget round {round_index + 1}/{rounds} {budget:4d} tokens: "
                f"{result.tokens_per_s:7.1f} tok/s, TTFT p50 {result.ttft_p50_ms:6.1f} ms, "
                f"ITL p99 {result.itl_p99_ms:5.1f} ms"
            )
            runs[budget].append(result)
    return [{"budget": b, **asdict(median_result(r))} for b, r in runs.items()]


def pass_cost(
    step: StepFunction,
    rows: int = 16,
    widths: tuple[int, ...] = (50, 100, 200, 250),
    repeats: int = 30,
) -> list[dict]:
    """One decode pass (1 new token per row) against a dense past of each width: median and
    minimum milliseconds. What a dense batch pays for its longest row."""
    c = step.config
    results = []
    for width in widths:
        past = [np.zeros((rows, c.n_head, width, c.head_dim), np.float32)] * (2 * c.n_layer)
        tokens = np.zeros((rows, 1), np.int64)
        positions = np.full((rows, 1), min(width, c.max_positions - 1), np.int64)
        mask = np.ones((rows, width + 1), np.int64)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            step(tokens, positions, mask, past)
            times.append(time.perf_counter() - start)
        results.append({"rows": rows, "past": width, "median_ms": 1e3 * float(np.median(times)),
                        "min_ms": 1e3 * min(times)})  # fmt: skip
    return results


class FreeStep:
    """A step function that costs (almost) nothing: outputs of the right shapes, made once per
    input shape and handed back again. Under it an engine's time is its own: scheduling, cache
    bookkeeping, the writes into its dense pasts, sampling, streaming and its threads'
    hand-offs, everything but the passes themselves."""

    def __init__(self, config) -> None:
        self.config = config
        self._outputs: dict[tuple[int, ...], tuple[np.ndarray, list[np.ndarray]]] = {}

    def __call__(self, tokens, positions, attention_mask, past):
        outputs = self._outputs.get(tokens.shape)
        if outputs is None:
            c, (rows, new) = self.config, tokens.shape
            rng = np.random.default_rng(rows * 1000 + new)
            logits = rng.random((rows, new, c.vocab_size), dtype=np.float32)
            kv = [rng.random((rows, c.n_head, new, c.head_dim), dtype=np.float32)
                  for _ in range(2 * c.n_layer)]  # fmt: skip
            outputs = self._outputs[tokens.shape] = (logits, kv)
        return outputs


def loop_cost(
    config,
    requests: list[GenerationRequest],
    variants: dict[str, Variant],
    rounds: int = 5,
    concurrency: int = 16,
    budget: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> list[dict]:
    """Each engine's own cost per token boundary: every request submitted at once and run to
    the end on ``FreeStep`` (no pass costs anything), ``rounds`` interleaved rounds, medians.
    A boundary is a continuous engine's iteration or a static engine's pass (prefill or
    decode); the engines are sized for ``concurrency`` streams (a static batch, the continuous
    engines' running sequences and blocks) at the token ``budget``. What it measures is the
    part of an iteration the model's size does not set."""
    free = FreeStep(config)
    times: dict[str, list[tuple[float, int, int]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, variant in variants.items():
            engine = build_variant(variant._replace(step=free), concurrency, budget)
            handles = [engine.submit(r) for r in requests]
            if isinstance(engine, StaticBatchingEngine):
                engine.draining = True  # every batch starts at once, the last one partial
            start = time.perf_counter()
            while engine.step():
                pass
            seconds = time.perf_counter() - start
            stats = engine.stats
            boundaries = (
                stats.iterations
                if isinstance(engine, ContinuousBatchingEngine)
                else stats.decode_passes + stats.prefill_passes
            )
            tokens = sum(len(h.tokens) for h in handles)
            times[name].append((seconds, boundaries, tokens))
    report = []
    for name, samples in times.items():
        seconds = np.array([s for s, _, _ in samples])
        boundaries, tokens = samples[0][1], samples[0][2]
        report.append({
            "engine": name, "boundaries": boundaries, "tokens": tokens,
            "us_per_boundary": 1e6 * float(np.median(seconds / [b for _, b, _ in samples])),
            "us_per_token": 1e6 * float(np.median(seconds / [t for _, _, t in samples])),
        })  # fmt: skip
    return report


Call = tuple[float, float, int, int, int, int, int]


class TimedStep:
    """A step function with every call timed: (start, end, rows, new tokens, past width,
    which, iteration) where ``which`` is the index of the engine's kept dense past the call
    read (a decode pass; the continuous engine keeps a short and a long one) or -1 (a
    prefill), and ``iteration`` what ``iteration()`` returned when the call began (the
    engine's iteration count: calls of one iteration share it, whichever thread runs them)."""

    def __init__(self, step: StepFunction) -> None:
        self.step = step
        self.config = step.config
        self.dense_pasts: list = []  # the engine's DensePasts, set once the engine exists
        self.iteration: Callable[[], int] = lambda: 0  # set once the engine exists
        self.calls: list[Call] = []

    def __call__(self, tokens, positions, attention_mask, past):
        iteration, start = self.iteration(), time.perf_counter()
        out = self.step(tokens, positions, attention_mask, past)
        which = next(
            (i for i, d in enumerate(self.dense_pasts) if np.may_share_memory(past[0], d.kv)), -1
        )
        end = time.perf_counter()
        self.calls.append((start, end, *tokens.shape, past[0].shape[2], which, iteration))
        return out


def _ms(values: list[float], q: float) -> float:
    return 1e3 * float(np.percentile(values, q)) if values else 0.0


def _union(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the intervals."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def iteration_split(calls: list[Call], prefill_is_boundary: bool) -> dict:
    """From timed calls grouped by iteration: the time from one iteration's first call to the
    next's (what a running stream waits between two tokens: the passes, then writing and
    sampling, retiring, scheduling and building the next inputs), counted when both carry a
    decode pass; split into its decode passes, its prefill passes (they overlap when the
    engine runs them at once: ``overlapped`` is the time both ran) and the rest. With
    ``prefill_is_boundary`` (static batching) an iteration holding a prefill is a batch
    boundary, which no running stream waits across: it is left out."""
    by_iteration: dict[int, list[Call]] = collections.defaultdict(list)
    for call in calls:
        by_iteration[call[6]].append(call)
    order = sorted(by_iteration, key=lambda k: min(c[0] for c in by_iteration[k]))
    gaps, with_prefill = [], []  # (seconds, decode, prefill, overlapped)
    for this, following in zip(order, order[1:], strict=False):
        mine, theirs = by_iteration[this], by_iteration[following]
        if not any(c[5] >= 0 for c in mine) or not any(c[5] >= 0 for c in theirs):
            continue
        prefill = sum(c[1] - c[0] for c in mine if c[5] < 0)
        if prefill_is_boundary and prefill:
            continue
        decode = sum(c[1] - c[0] for c in mine if c[5] >= 0)
        busy = _union([(c[0], c[1]) for c in mine])
        start = min(c[0] for c in mine)
        gaps.append((min(c[0] for c in theirs) - start, decode, prefill, decode + prefill - busy))
        with_prefill.append(prefill > 0)
    decode_widths = [c[4] for c in calls if c[5] >= 0]
    prefill_tokens = [c[2] * c[3] for c in calls if c[5] < 0]
    total = [g[0] for g in gaps]
    carrying = [g[0] for g, p in zip(gaps, with_prefill, strict=True) if p]
    plain = [g[0] for g, p in zip(gaps, with_prefill, strict=True) if not p]
    return {
        "iterations": len(gaps),
        "iteration_ms": {q: _ms(total, q) for q in (50, 90, 99)},
        "mean_split_ms": {
            "decode_pass": 1e3 * float(np.mean([g[1] for g in gaps])),
            "prefill_pass": 1e3 * float(np.mean([g[2] for g in gaps])),
            "overlapped": 1e3 * float(np.mean([g[3] for g in gaps])),
            "other": 1e3 * float(np.mean([g[0] - g[1] - g[2] + g[3] for g in gaps])),
        },
        "decode_pass_ms": {q: _ms([g[1] for g in gaps], q) for q in (50, 99)},
        "decode_width_p50": float(np.median(decode_widths)) if decode_widths else 0.0,
        "share_with_prefill": float(np.mean(with_prefill)) if with_prefill else 0.0,
        "with_prefill_ms": {q: _ms(carrying, q) for q in (50, 99)},
        "without_prefill_ms": {q: _ms(plain, q) for q in (50, 99)},
        "prefill_pass_tokens_p50": float(np.median(prefill_tokens)) if prefill_tokens else 0.0,
    }


def step_breakdown(
    step: StepFunction,
    text: np.ndarray,
    concurrency: int,
    requests_per_client: int,
    rounds: int,
    progress=print,
    budget: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    variants: dict[str, Variant] | None = None,
) -> dict:
    """The batching workload at ``concurrency``, the variants (name -> ``Variant``; default
    static, static at full width, continuous, continuous with every pass serial and with one
    dense past, all on ``step``) alternating, every
    step-function call timed (``iteration_split``); medians over rounds."""
    requests = workload(text, concurrency * requests_per_client, step.config.max_positions,
                        seed=concurrency)  # fmt: skip
    kinds = ("static", "static-full-width", "continuous", "continuous-serial",
             "continuous-one-past")  # fmt: skip
    variants = variants or {kind: Variant(kind, step) for kind in kinds}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for round_index in range(rounds):
        for name, variant in variants.items():
            timed = TimedStep(variant.step)
            engine = build_variant(variant._replace(step=timed), concurrency, budget)
            if isinstance(engine, ContinuousBatchingEngine):
                pasts = engine.dense
                timed.iteration = lambda e=engine: e.stats.iterations
            else:  # every static pass is its own iteration
                pasts = [engine.dense]
                timed.iteration = lambda e=engine: e.stats.decode_passes + e.stats.prefill_passes
            timed.dense_pasts = pasts
            result = run_load(engine, requests, concurrency)
            split = iteration_split(
                timed.calls, prefill_is_boundary=variant.kind.startswith("static")
            )
            split["generated_tokens"] = engine.stats.generated_tokens
            split["itl_p99_ms"], split["tokens_per_s"] = result.itl_p99_ms, result.tokens_per_s
            split["ttft_p50_ms"], split["ttft_p99_ms"] = result.ttft_p50_ms, result.ttft_p99_ms
            split["resizes"] = sum(d.resizes for d in pasts)
            runs[name].append(split)
            progress(
                f"  steps round {round_index + 1}/{rounds} {name:19s}: iteration p50/p99 "
                f"{split['iteration_ms'][50]:.2f}/{split['iteration_ms'][99]:.2f} ms, split "
                + ", ".join(f"{k} {v:.2f}" for k, v in split["mean_split_ms"].items())
                + f" ms; {100 * split['share_with_prefill']:.0f}% carry prefill "
                f"(p50 {split['with_prefill_ms'][50]:.2f} ms vs "
                f"{split['without_prefill_ms'][50]:.2f} without); {split['tokens_per_s']:.0f} "
                f"tok/s, ITL p99 {split['itl_p99_ms']:.2f} ms"
            )
    return {name: _median_nested(r) for name, r in runs.items()}


def _median_nested(runs: list[dict]) -> dict:
    first = runs[0]
    return {
        key: _median_nested([r[key] for r in runs])
        if isinstance(value, dict)
        else float(np.median([r[key] for r in runs]))
        for key, value in first.items()
    }


def verdict(
    results: list[RunResult], concurrency: int = 16, engine: str = "continuous"
) -> dict[str, float | bool | str]:
    """The target at concurrency 16: ``engine`` at >= 2x the tokens/s of every static variant
    in ``results`` (engine names starting "static") at a p99 ITL no higher than any of theirs.
    The figures quoted are the binding ones, the ones ``target_met`` checks: tokens/s against
    the static with the most tokens/s, p99 ITL against the static with the lowest p99.
    ``target_met_against`` has the target checked against each static alone."""
    at = [r for r in results if r.concurrency == concurrency]
    continuous = next(r for r in at if r.engine == engine)
    statics = [r for r in at if r.engine.startswith("static")]
    fastest = max(statics, key=lambda r: r.tokens_per_s)
    steadiest = min(statics, key=lambda r: r.itl_p99_ms)
    speedup = continuous.tokens_per_s / fastest.tokens_per_s
    ratio = continuous.itl_p99_ms / steadiest.itl_p99_ms

    def held(tokens_static: RunResult, p99_static: RunResult) -> tuple[bool, bool]:
        """(tokens/s held against ``tokens_static``, p99 ITL held against ``p99_static``)."""
        return (
            continuous.tokens_per_s / tokens_static.tokens_per_s >= TARGET_TOKENS_PER_S_SPEEDUP,
            continuous.itl_p99_ms / p99_static.itl_p99_ms <= TARGET_ITL_P99_RATIO,
        )

    tokens_held, p99_held = held(fastest, steadiest)
    against = {static.engine: all(held(static, static)) for static in statics}
    return {
        "concurrency": concurrency,
        "engine": engine,
        "tokens_per_s_static": fastest.engine,
        "tokens_per_s_speedup": speedup,
        "itl_p99_static": steadiest.engine,
        "itl_p99_ratio": ratio,
        "tokens_per_s_held": tokens_held,
        "itl_p99_held": p99_held,
        "target_met": tokens_held and p99_held,
        "target_met_against": against,
    }


def series_summary(verdicts: list[dict[str, float | bool | str]]) -> dict[str, float | int | str]:
    """One engine's verdicts over repeated runs (``verdict``'s dicts, one per run): in how many
    runs the target was met, and each figure's lowest, median and highest value."""
    if not verdicts or len({v["engine"] for v in verdicts}) != 1:
        raise ValueError("need one or more verdicts, all of one engine")
    summary: dict[str, float | int | str] = {
        "engine": str(verdicts[0]["engine"]),
        "runs": len(verdicts),
        "target_met_runs": sum(bool(v["target_met"]) for v in verdicts),
        "tokens_per_s_held_runs": sum(bool(v["tokens_per_s_held"]) for v in verdicts),
        "itl_p99_held_runs": sum(bool(v["itl_p99_held"]) for v in verdicts),
        "target_met_runs_against": {
            static: sum(bool(v["target_met_against"][static]) for v in verdicts)
            for static in verdicts[0]["target_met_against"]
        },
    }
    for figure in ("tokens_per_s_speedup", "itl_p99_ratio"):
        values = [float(v[figure]) for v in verdicts]
        summary |= {
            f"{figure}_min": min(values),
            f"{figure}_median": float(np.median(values)),
            f"{figure}_max": max(values),
        }
    return summary


def print_verdicts(results: list[RunResult], engines: list[str]) -> list[dict]:
    """The target's verdict at C=16 for each non-static engine of ``results``, printed one line
    each (none without a static to check against)."""
    if not any(name.startswith("static") for name in engines):
        return []
    verdicts = [verdict(results, engine=name) for name in engines if not name.startswith("static")]
    for summary in verdicts:
        at16 = next(r for r in results if r.concurrency == 16 and r.engine == summary["engine"])
        print(
            f"{summary['engine']} at C=16: {summary['tokens_per_s_speedup']:.2f}x the tokens/s "
            f"of {summary['tokens_per_s_static']}, p99 ITL {summary['itl_p99_ratio']:.2f}x that "
            f"of {summary['itl_p99_static']}, TTFT p50/p99 {at16.ttft_p50_ms:.1f}/"
            f"{at16.ttft_p99_ms:.1f} ms -> target {'met' if summary['target_met'] else 'missed'}"
        )
    return verdicts


def series_line(summary: dict[str, float | int | str]) -> str:
    """``series_summary`` as one line."""
    return (
        f"{summary['engine']} over {summary['runs']} runs: target met in "
        f"{summary['target_met_runs']}; tokens/s >= {TARGET_TOKENS_PER_S_SPEEDUP:g}x in "
        f"{summary['tokens_per_s_held_runs']} "
        f"({summary['tokens_per_s_speedup_min']:.2f}-{summary['tokens_per_s_speedup_max']:.2f}x, "
        f"median {summary['tokens_per_s_speedup_median']:.2f}x), p99 ITL <= static's in "
        f"{summary['itl_p99_held_runs']} ({summary['itl_p99_ratio_min']:.2f}-"
        f"{summary['itl_p99_ratio_max']:.2f}, median {summary['itl_p99_ratio_median']:.2f}); "
        "against each static alone: "
        + ", ".join(f"{name} {n}" for name, n in summary["target_met_runs_against"].items())
    )


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


EXPERIMENTS = ("batching", "prefix", "memory", "budget", "passcost", "steps", "loopcost")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="generation_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="concurrency 16 only, fewer requests")
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated client counts")
    parser.add_argument("--requests-per-client", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument(
        "--runs", type=int, default=1,
        help="repeat the batching experiment this many times (each --rounds rounds) and count "
        "the runs in which each engine met the target",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--int8", action="store_true", help="serve the INT8 graph")
    parser.add_argument(
        "--http", action="store_true", help="through the OpenAI route on a loopback uvicorn"
    )
    parser.add_argument(
        "--experiments", default="batching",
        help=f"comma-separated, of {','.join(EXPERIMENTS)} (prefix always goes over HTTP)",
    )  # fmt: skip
    parser.add_argument("--kv-blocks", type=int, default=64, help="the memory experiment's pool")
    parser.add_argument("--budgets", default="16,32,48,96,256", help="the budget sweep's values")
    parser.add_argument(
        "--budget", type=int, default=DEFAULT_MAX_NUM_BATCHED_TOKENS,
        help="max_num_batched_tokens of the batching and steps experiments' continuous engine",
    )  # fmt: skip
    parser.add_argument(
        "--train-steps", type=int, default=DEMO_TRAINING.steps,
        help="the GPT checkpoint's training steps (default: the demo's model, so its cache is "
        "shared; speed does not depend on the weights)",
    )  # fmt: skip
    parser.add_argument(
        "--admission-delays", default="",
        help="admission delay factors (in last-prefill latencies) the batching and steps "
        "experiments also run as continuous-delay-F-bB, e.g. 0,2,8",
    )  # fmt: skip
    parser.add_argument(
        "--delay-budgets", default="",
        help="max_num_batched_tokens values each admission delay runs at (default --budget)",
    )  # fmt: skip
    parser.add_argument(
        "--max-num-seqs", default="",
        help="caps on running sequences the batching and steps experiments also run as "
        "continuous-seqs-N-bB (at each of --cap-budgets), e.g. 8,12",
    )  # fmt: skip
    parser.add_argument(
        "--cap-budgets", default="",
        help="max_num_batched_tokens values each --max-num-seqs cap runs at (default --budget)",
    )  # fmt: skip
    parser.add_argument(
        "--engines", default="",
        help="only these of the batching and steps experiments' engines (default: all; the "
        "static ones are the baselines the target is checked against); the admission delays and "
        "the caps run anyway",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("report/generation"))
    args = parser.parse_args(argv)
    try:
        concurrencies = [int(c) for c in args.concurrency.split(",")]
        budgets = [int(b) for b in args.budgets.split(",")]
        delays = [float(f) for f in args.admission_delays.split(",") if f]
        delay_budgets = [int(b) for b in args.delay_budgets.split(",") if b]
        caps = [int(n) for n in args.max_num_seqs.split(",") if n]
        cap_budgets = [int(b) for b in args.cap_budgets.split(",") if b]
        engines = [e for e in args.engines.split(",") if e]
        experiments = args.experiments.split(",")
        if (
            not concurrencies
            or min(concurrencies) < 1
            or min(budgets) < 1
            or min(delay_budgets, default=1) < 1
            or min(caps + cap_budgets, default=1) < 1
            or not all(0 <= f < float("inf") for f in delays)
            or min(args.requests_per_client, args.rounds, args.runs) < 1
            or min(args.kv_blocks, args.budget) < 1
            or not set(experiments) <= set(EXPERIMENTS)
            or args.train_steps < 1
        ):
            raise ValueError
    except ValueError:
        print(
            "error: --concurrency, --budgets, --delay-budgets, --max-num-seqs and --cap-budgets "
            "need positive integers (e.g. "
            "1,4,16), --admission-delays finite factors >= 0; "
            "--requests-per-client, --rounds, --runs, --kv-blocks, --budget and --train-steps "
            "must be positive; "
            f"--experiments takes {','.join(EXPERIMENTS)}",
            file=sys.stderr,
        )
        return 2
    if args.quick:
        concurrencies, args.requests_per_client, args.rounds, args.runs = [16], 3, 1, 1
    if 16 not in concurrencies:
        concurrencies.append(16)  # the target is stated at 16

    from inference_pipeline.generation.artifacts import load_artifacts
    from inference_pipeline.generation.runtime import OrtStep
    from inference_pipeline.generation.train import corpus_bytes
    from inference_pipeline.serving.runner import freeze_startup_objects

    artifacts = load_artifacts(settings=TrainSettings(steps=args.train_steps))
    path = artifacts.files.onnx_int8 if args.int8 else artifacts.files.onnx_fp32
    step = OrtStep(path, artifacts.model.config, threads=args.threads)
    freeze_startup_objects()  # as the server does before it listens (serving/runner.py)
    # Static batching runs one pass at a time, so a second core helps it only inside a pass:
    # it is also measured with two intra-op threads, and the targets hold against both.
    batching = {"static": Variant("static", step)}
    if args.threads != 2:
        two = OrtStep(path, artifacts.model.config, threads=2)
        batching["static-2-threads"] = Variant("static", two)
    batching |= {
        "continuous": Variant("continuous", step),
        "continuous-serial": Variant("continuous-serial", step),
        "continuous-one-past": Variant("continuous-one-past", step),
    }
    if engines:
        unknown = set(engines) - set(batching)
        if unknown:
            print(f"error: --engines: unknown {sorted(unknown)}; known: {','.join(batching)}",
                  file=sys.stderr)  # fmt: skip
            return 2
        batching = {name: batching[name] for name in engines}
    # The admission delay against the default scheduler: each factor at each budget (a
    # delayed batch of admissions shares one iteration only if the budget holds their chunks).
    for factor in delays:
        for budget in delay_budgets or [args.budget]:
            if (factor, budget) != (DEFAULT_ADMISSION_DELAY_FACTOR, args.budget):
                name = f"continuous-delay-{factor:g}-b{budget}"
                batching[name] = Variant("continuous", step, budget, factor)
    # Fewer sequences running than clients: narrower decode passes, the rest wait.
    for cap in caps:
        for budget in cap_budgets or [args.budget]:
            name = f"continuous-seqs-{cap}-b{budget}"
            batching[name] = Variant("continuous", step, budget, max_num_seqs=cap)
    steps = {**batching, "static-full-width": Variant("static-full-width", step)}
    _, held_out = corpus_bytes()
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "_http" if args.http else ""
    report: dict = {
        "model": str(path),
        "train_steps": args.train_steps,
        "machine": "shared 2-core CPU (other jobs running; compare ratios, not absolutes)",
        "output_lengths": dict(zip(map(str, OUTPUT_LENGTHS), OUTPUT_WEIGHTS, strict=True)),
        "rounds": args.rounds,
        "slo": asdict(SLO),
        "max_num_batched_tokens": args.budget,
        "transport": "HTTP SSE /v1/completions, loopback uvicorn" if args.http else "in process",
    }
    per_client, rounds = args.requests_per_client, args.rounds
    print(
        f"generation bench: {path.name}, experiments {experiments}, concurrency "
        f"{concurrencies}, {per_client} requests per client, output lengths {OUTPUT_LENGTHS}"
    )
    # The HTTP load's clients run in a process of their own, started once for the run.
    over_http = (args.http and "batching" in experiments) or "prefix" in experiments
    with contextlib.ExitStack() as stack:
        clients = stack.enter_context(ClientProcess()) if over_http else None
        if "batching" in experiments:
            runs: list[dict] = []
            for run in range(args.runs):
                if args.runs > 1:
                    print(f"run {run + 1}/{args.runs}")
                results = benchmark(step, held_out, sorted(set(concurrencies)), per_client,
                                    rounds, over_http=args.http, budget=args.budget,
                                    variants=batching, clients=clients)  # fmt: skip
                runs.append({
                    "results (median of rounds)": [asdict(r) for r in results],
                    "verdicts": print_verdicts(results, list(batching)),
                })  # fmt: skip
            figure = plot(results, args.out / f"generation_batching{suffix}.png")
            report |= runs[-1]
            verdicts = runs[-1]["verdicts"]
            report["verdict"] = next((v for v in verdicts if v["engine"] == "continuous"), None)
            if args.runs > 1:
                report["runs"] = runs
                report["series"] = [
                    series_summary([v for r in runs for v in r["verdicts"] if v["engine"] == e])
                    for e in (v["engine"] for v in verdicts)
                ]
                for summary in report["series"]:
                    print(series_line(summary))
            print(f"plot {figure}")
        if "prefix" in experiments:
            prefix = prefix_benchmark(step, held_out, 16, per_client, rounds, clients)
            report["prefix_caching"] = prefix
            print(
                f"prefix caching at C=16: TTFT p50 {prefix['off']['ttft_p50_ms']:.1f} -> "
                f"{prefix['on']['ttft_p50_ms']:.1f} ms ({prefix['ttft_p50_speedup']:.2f}x); hit "
                f"rate {prefix['hit_rate_metrics']:.3f} on /metrics, "
                f"{prefix['hit_rate_workload']:.3f} by the workload"
            )
        if "memory" in experiments:
            memory = memory_benchmark(step, held_out, 16, per_client, args.kv_blocks, rounds)
            report["kv_memory"] = memory
            print(
                f"{args.kv_blocks} KV blocks at C=16: peak running "
                f"{memory['reserve_up_front']['peak_running']:.0f} reserve-up-front vs "
                f"{memory['on_demand']['peak_running']:.0f} on demand "
                f"({memory['peak_running_ratio']:.2f}x), "
                f"{memory['on_demand']['preemptions']:.0f} preemptions"
            )
        if "budget" in experiments:
            report["budget_sweep"] = budget_sweep(step, held_out, 16, per_client, budgets, rounds)
        if "steps" in experiments:
            report["step_breakdown"] = step_breakdown(step, held_out, 16, per_client, rounds,
                                                      budget=args.budget,
                                                      variants=steps)  # fmt: skip
        if "loopcost" in experiments:
            # intra-op threads are the passes' business: under FreeStep both statics are one
            own = {name: v for name, v in batching.items() if name != "static-2-threads"}
            requests = workload(held_out, 16 * per_client, step.config.max_positions, seed=16)
            report["loop_cost"] = loop_cost(step.config, requests, own, rounds, budget=args.budget)
            for row in report["loop_cost"]:
                print(f"  {row['engine']:20s} {row['us_per_boundary']:6.1f} us per token boundary "
                      f"({row['boundaries']} boundaries), {row['us_per_token']:5.1f} us per "
                      f"token")  # fmt: skip
        if "passcost" in experiments:
            report["pass_cost"] = pass_cost(step)
            for row in report["pass_cost"]:
                print(f"  decode pass, {row['rows']} rows x {row['past']} past positions: "
                      f"median {row['median_ms']:.2f} ms, min {row['min_ms']:.2f} ms")  # fmt: skip
    (args.out / f"generation_bench{suffix}.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out / f'generation_bench{suffix}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
