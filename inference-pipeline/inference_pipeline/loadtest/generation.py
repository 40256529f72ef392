"""`loadtest --generate`: the closed-loop sweep against a ``generate_stream`` route, measured
the way LLM servers are: time to first token (TTFT), inter-token latency (ITL), tokens/s and
requests/s per concurrency level. Token times are when each SSE event reaches the client
(``Connection.post_stream``), so they include the server's queueing and the transport.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from phase01_common.stats import percentiles

from inference_pipeline.loadtest.generator import REJECT_STATUSES, Sample
from inference_pipeline.loadtest.report import fixed_width

GENERATION_PERCENTILES = (50, 90, 99)


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

    def as_dict(self) -> dict:
        return asdict(self)


def generation_bodies(prompts: Sequence[str], max_tokens: int) -> list[bytes]:
    """Pre-encoded ``generate_stream`` bodies (greedy, ``max_tokens`` each)."""
    params = {"max_tokens": max_tokens}
    return [json.dumps({"text_input": p, "parameters": params}).encode() for p in prompts]


def token_timings(samples: Sequence[Sample]) -> tuple[list[float], list[float]]:
    """(TTFTs, inter-token gaps) in seconds over the answered streams that sent a token."""
    streams = [s for s in samples if s.status == 200 and s.arrivals]
    ttfts = [s.arrivals[0] - s.start for s in streams]
    gaps = [float(g) for s in streams for g in np.diff(s.arrivals)]
    return ttfts, gaps


def _percentiles(seconds: list[float]) -> dict[str, float]:
    return percentiles(seconds, GENERATION_PERCENTILES, scale=1e3)


def summarize_generation(
    concurrency: int, samples: Sequence[Sample], window_s: float
) -> GenerationLevelResult:
    ok = [s for s in samples if s.status == 200]
    rejects = sum(s.status in REJECT_STATUSES for s in samples)
    tokens = sum(len(s.arrivals) for s in ok)
    ttfts, gaps = token_timings(samples)
    return GenerationLevelResult(
        concurrency=concurrency,
        requests=len(samples),
        successes=len(ok),
        rejects=rejects,
        errors=len(samples) - len(ok) - rejects,
        duration_s=window_s,
        tokens=tokens,
        tokens_per_s=tokens / window_s if window_s > 0 else 0.0,
        requests_per_s=len(ok) / window_s if window_s > 0 else 0.0,
        ttft_ms=_percentiles(ttfts),
        itl_ms=_percentiles(gaps),
    )


def format_generation_table(results: Sequence[GenerationLevelResult]) -> str:
    head = ("level", "tokens/s", "req/s", "TTFT p50/p90/p99 ms", "ITL p50/p90/p99 ms", "ok", "rej")
    rows = [head]

    def triple(stats: dict[str, float]) -> str:
        return "/".join(f"{stats[f'p{p}']:.1f}" for p in GENERATION_PERCENTILES) if stats else "-"

    for r in results:
        rows.append(
            (
                f"c={r.concurrency}",
                f"{r.tokens_per_s:.1f}",
                f"{r.requests_per_s:.2f}",
                triple(r.ttft_ms),
                triple(r.itl_ms),
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
