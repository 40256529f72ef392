"""`loadtest --generate`: the closed-loop sweep against an OpenAI ``/v1/completions`` route
(streaming), measured as vLLM's ``benchmark_serving`` reports it: time to first token (TTFT),
time per output token after the first (TPOT), inter-token latency (ITL) and end-to-end
latency, each as mean, median (p50), p90, p99; request and output-token throughput; and
goodput, the requests per second that met a declared SLO (TTFT and TPOT both under their
limits). Token times are when each SSE chunk reaches the client (``Connection.post_stream``),
so they include the server's queueing and the transport; the load sets no stop sequence, so
every chunk is one byte-token.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from phase01_common.stats import percentiles

from inference_pipeline.loadtest.generator import REJECT_STATUSES, Sample, closed_loop_samples
from inference_pipeline.loadtest.report import fixed_width

GENERATION_PERCENTILES = (50, 90, 99)
COMPLETIONS_PATH = "/v1/completions"


@dataclass(frozen=True)
class ServiceLevel:
    """A declared SLO: a request is "good" when both hold."""

    ttft_ms: float = 250.0
    tpot_ms: float = 25.0


@dataclass
class GenerationLevelResult:
    """One concurrency level (milliseconds; tokens/s and requests/s over the window)."""

    concurrency: int
    requests: int
    successes: int
    rejects: int
    errors: int
    duration_s: float
    tokens: int
    tokens_per_s: float
    requests_per_s: float
    ttft_ms: dict[str, float] = field(default_factory=dict)
    itl_ms: dict[str, float] = field(default_factory=dict)
    tpot_ms: dict[str, float] = field(default_factory=dict)
    e2e_ms: dict[str, float] = field(default_factory=dict)
    goodput_rps: float = 0.0
    slo: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def completion_body(model: str, prompt: str | list[int], max_tokens: int) -> bytes:
    """One pre-encoded streaming ``/v1/completions`` body (greedy, exactly ``max_tokens``)."""
    body = {
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    return json.dumps(body).encode()


def generation_bodies(model: str, prompts: Sequence[str], max_tokens: int) -> list[bytes]:
    return [completion_body(model, p, max_tokens) for p in prompts]


def replay_streams(
    host: str, port: int, bodies: list[bytes], concurrency: int, timeout_s: float = 600.0
) -> tuple[list[Sample], float]:
    """Every body sent once, in order, by ``concurrency`` closed-loop clients streaming
    ``/v1/completions``: every request's sample (no warm-up window) and the window (s) from
    the first request's start to the last one's end."""
    samples, _ = asyncio.run(
        closed_loop_samples(host, port, COMPLETIONS_PATH, bodies, concurrency, 3600.0,
                            len(bodies), 0.0, timeout_s, stream=True)
    )  # fmt: skip
    window = max(s.end for s in samples) - min(s.start for s in samples) if samples else 0.0
    return samples, window


@dataclass(frozen=True)
class StreamTimings:
    """Per answered stream that sent a token, in seconds."""

    ttft: list[float]
    tpot: list[float]  # (last - first token) / (tokens - 1), streams of 2+ tokens
    e2e: list[float]
    gaps: list[float]  # every inter-token gap of every stream


def token_timings(samples: Sequence[Sample]) -> StreamTimings:
    streams = [s for s in samples if s.status == 200 and s.arrivals]
    return StreamTimings(
        ttft=[s.arrivals[0] - s.start for s in streams],
        tpot=[
            (s.arrivals[-1] - s.arrivals[0]) / (len(s.arrivals) - 1)
            for s in streams
            if len(s.arrivals) > 1
        ],
        e2e=[s.end - s.start for s in streams],
        gaps=[float(g) for s in streams for g in np.diff(s.arrivals)],
    )


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    """mean and p50 (median) / p90 / p99, in milliseconds."""
    if not len(seconds):
        return {}
    return {
        "mean": float(np.mean(seconds)) * 1e3,
        **percentiles(seconds, GENERATION_PERCENTILES, scale=1e3),
    }


def good_requests(samples: Sequence[Sample], slo: ServiceLevel) -> int:
    """Answered streams whose TTFT and TPOT both met ``slo``."""
    good = 0
    for s in samples:
        if s.status != 200 or not s.arrivals:
            continue
        ttft = s.arrivals[0] - s.start
        tpot = (
            (s.arrivals[-1] - s.arrivals[0]) / (len(s.arrivals) - 1) if len(s.arrivals) > 1 else 0
        )
        good += ttft * 1e3 <= slo.ttft_ms and tpot * 1e3 <= slo.tpot_ms
    return good


def summarize_generation(
    concurrency: int, samples: Sequence[Sample], window_s: float, slo: ServiceLevel | None = None
) -> GenerationLevelResult:
    slo = slo or ServiceLevel()
    ok = [s for s in samples if s.status == 200]
    rejects = sum(s.status in REJECT_STATUSES for s in samples)
    tokens = sum(len(s.arrivals) for s in ok)
    timings = token_timings(samples)
    per_s = 1.0 / window_s if window_s > 0 else 0.0
    return GenerationLevelResult(
        concurrency=concurrency,
        requests=len(samples),
        successes=len(ok),
        rejects=rejects,
        errors=len(samples) - len(ok) - rejects,
        duration_s=window_s,
        tokens=tokens,
        tokens_per_s=tokens * per_s,
        requests_per_s=len(ok) * per_s,
        ttft_ms=latency_stats(timings.ttft),
        itl_ms=latency_stats(timings.gaps),
        tpot_ms=latency_stats(timings.tpot),
        e2e_ms=latency_stats(timings.e2e),
        goodput_rps=good_requests(samples, slo) * per_s,
        slo=asdict(slo),
    )


def format_generation_table(results: Sequence[GenerationLevelResult]) -> str:
    head = ("level", "tokens/s", "req/s", "goodput/s", "TTFT mean/p50/p99 ms",
            "TPOT mean/p50/p99 ms", "ITL mean/p50/p99 ms", "e2e mean/p50/p99 ms",
            "ok", "rej")  # fmt: skip
    rows = [head]

    def triple(stats: dict[str, float]) -> str:
        keys = ("mean", "p50", "p99")
        return "/".join(f"{stats[k]:.1f}" for k in keys) if stats else "-"

    for r in results:
        rows.append(
            (
                f"c={r.concurrency}",
                f"{r.tokens_per_s:.1f}",
                f"{r.requests_per_s:.2f}",
                f"{r.goodput_rps:.2f}",
                triple(r.ttft_ms),
                triple(r.tpot_ms),
                triple(r.itl_ms),
                triple(r.e2e_ms),
                str(r.successes),
                str(r.rejects + r.errors),
            )
        )
    return fixed_width(rows)


def plot_generation(path: Path, results: Sequence[GenerationLevelResult], title: str) -> None:
    """Tokens/s and requests/s, TTFT and ITL (p50 solid, p99 dashed) against concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in results if r.ttft_ms), key=lambda r: r.concurrency)
    xs = [r.concurrency for r in rows]
    figure, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot(xs, [r.tokens_per_s for r in rows], "o-", label="tokens/s")
    twin = axes[0].twinx()
    twin.plot(xs, [r.requests_per_s for r in rows], "s--", color="C1", label="requests/s")
    twin.set_ylabel("requests/s")
    for ax, key, name in ((axes[1], "ttft_ms", "TTFT"), (axes[2], "itl_ms", "inter-token")):
        ax.plot(xs, [getattr(r, key)["p50"] for r in rows], "o-", label="p50")
        ax.plot(xs, [getattr(r, key)["p99"] for r in rows], "s--", label="p99")
        ax.set_title(f"{name} latency (ms)")
        ax.legend(fontsize=8)
    axes[0].set_title("throughput")
    axes[0].set_ylabel("tokens/s")
    for ax in axes:
        ax.set_xlabel("concurrent streams")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def progress_line(result: GenerationLevelResult) -> None:
    ttft = result.ttft_ms.get("p50", float("nan"))
    itl = result.itl_ms.get("p99", float("nan"))
    print(
        f"[loadtest] concurrency {result.concurrency}: {result.tokens_per_s:.1f} tokens/s, "
        f"TTFT p50 {ttft:.1f} ms, ITL p99 {itl:.1f} ms, {result.rejects} rejects, "
        f"{result.errors} errors",
        file=sys.stderr,
        flush=True,
    )
