"""Closed-loop (concurrency) and open-loop (Poisson rate) load, perf_analyzer's two modes.

Closed loop: ``concurrency`` workers each send a request, wait for the answer, send the next.
Throughput is what the server sustains at that concurrency; latency is per request.
Open loop: arrivals follow a Poisson process at ``rate`` requests/s, each sent at its
INTENDED time whatever happened before, and its latency counts from that intended time. A
server that falls behind thus shows its queueing in the latency instead of slowing the
generator down and hiding it (coordinated omission).
Every loop is bounded by a request count and a wall-clock time.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field

import numpy as np
from phase01_common.stats import percentiles

from inference_pipeline.loadtest.client import Connection

REJECT_STATUSES = (429, 503)
PERCENTILES = (50, 90, 95, 99)


@dataclass
class LevelResult:
    """One load level's outcome (latencies in milliseconds, throughput in answers/s)."""

    mode: str  # "concurrency" or "rate"
    level: float
    requests: int
    successes: int
    rejects: int
    errors: int
    duration_s: float
    throughput: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    late_sends: int = 0  # open loop: sends that left > 1 ms after their intended time

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Sample:
    start: float
    end: float
    status: int  # 0 for a transport error
    arrivals: list[float] = field(default_factory=list)  # streamed token events (generation)


def request_bodies(texts: list[str], batch: int) -> list[bytes]:
    """Pre-encoded v2 JSON bodies, ``batch`` texts each (encoding is not measured)."""
    bodies = []
    for i in range(0, max(len(texts) - batch + 1, 1), batch):
        chunk = texts[i : i + batch]
        tensor = {"name": "TEXT", "datatype": "BYTES", "shape": [len(chunk)], "data": chunk}
        outputs = [{"name": "label"}, {"name": "logits"}]
        bodies.append(json.dumps({"inputs": [tensor], "outputs": outputs}).encode())
    return bodies


async def _send(
    connection: Connection, path: str, body: bytes, timeout: float, arrivals: list | None = None
) -> int:
    """The status (0 on a transport error); with ``arrivals``, a streamed (SSE) request whose
    token events' arrival times are appended there."""
    try:
        if arrivals is None:
            status, _ = await asyncio.wait_for(connection.post(path, body), timeout)
        else:
            status, _ = await asyncio.wait_for(
                connection.post_stream(path, body, arrivals), timeout
            )
        return status
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
        return 0


def summarize(mode: str, level: float, samples: list[Sample], window_s: float) -> LevelResult:
    ok = [s for s in samples if s.status == 200]
    rejects = sum(s.status in REJECT_STATUSES for s in samples)
    latencies = np.array([(s.end - s.start) * 1e3 for s in ok])
    stats = percentiles(latencies, PERCENTILES)
    if ok:
        stats["mean"] = float(latencies.mean())
    return LevelResult(
        mode=mode,
        level=level,
        requests=len(samples),
        successes=len(ok),
        rejects=rejects,
        errors=len(samples) - len(ok) - rejects,
        duration_s=window_s,
        throughput=len(ok) / window_s if window_s > 0 else 0.0,
        latency_ms=stats,
    )


async def closed_loop(
    host: str, port: int, path: str, bodies: list[bytes], concurrency: int,
    duration_s: float, max_requests: int, warmup_s: float = 0.5, timeout_s: float = 10.0,
) -> LevelResult:  # fmt: skip
    """``concurrency`` workers back to back; requests that START in the warm-up are dropped."""
    samples, window = await closed_loop_samples(
        host, port, path, bodies, concurrency, duration_s, max_requests, warmup_s, timeout_s
    )
    return summarize("concurrency", concurrency, samples, window)


async def closed_loop_samples(
    host: str, port: int, path: str, bodies: list[bytes], concurrency: int,
    duration_s: float, max_requests: int, warmup_s: float = 0.5, timeout_s: float = 10.0,
    stream: bool = False,
) -> tuple[list[Sample], float]:  # fmt: skip
    """The closed loop's measured samples and window (s). Bodies go out in order (request k
    sends ``bodies[k % len(bodies)]``), so ``max_requests=len(bodies)`` replays a workload
    exactly once; ``stream`` reads SSE answers and records each token event's arrival.
    Every worker sends at least one measured request (one that starts after the warm-up),
    even past ``duration_s``: on a slow machine a short window still yields a sample per
    worker instead of none."""
    begin = time.perf_counter()
    measure_from, stop_at = begin + warmup_s, begin + warmup_s + duration_s
    samples: list[Sample] = []
    sent = 0

    async def worker() -> None:
        nonlocal sent
        connection = Connection(host, port)
        measured = False
        try:
            while (time.perf_counter() < stop_at or not measured) and sent < max_requests:
                body = bodies[sent % len(bodies)]
                sent += 1
                arrivals: list[float] | None = [] if stream else None
                start = time.perf_counter()
                status = await _send(connection, path, body, timeout_s, arrivals)
                if start >= measure_from:
                    samples.append(Sample(start, time.perf_counter(), status, arrivals or []))
                    measured = True
        finally:
            await connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    window = min(time.perf_counter(), max(s.end for s in samples) if samples else stop_at)
    return samples, max(window - measure_from, 1e-9)


async def open_loop(
    host: str, port: int, path: str, bodies: list[bytes], rate: float,
    duration_s: float, max_requests: int, warmup_s: float = 0.5, timeout_s: float = 10.0,
    seed: int = 0,
) -> LevelResult:  # fmt: skip
    """Poisson arrivals at ``rate``/s; latency from each request's intended send time."""
    rng = random.Random(seed)
    offsets, t = [], 0.0
    while len(offsets) < max_requests:
        t += rng.expovariate(rate)
        if t > warmup_s + duration_s:
            break
        offsets.append(t)
    idle: list[Connection] = []
    samples: list[Sample] = []
    late = 0
    begin = time.perf_counter()

    async def one(index: int, offset: float) -> None:
        nonlocal late
        intended = begin + offset
        await asyncio.sleep(max(intended - time.perf_counter(), 0.0))
        if time.perf_counter() - intended > 1e-3:
            late += 1
        connection = idle.pop() if idle else Connection(host, port)
        status = await _send(connection, path, bodies[index % len(bodies)], timeout_s)
        if offset >= warmup_s:
            samples.append(Sample(intended, time.perf_counter(), status))
        idle.append(connection)

    await asyncio.gather(*(one(i, offset) for i, offset in enumerate(offsets)))
    for connection in idle:
        await connection.close()
    # answers that arrive after the arrival window still count, over the time they took
    window = max([s.end for s in samples], default=begin + warmup_s + duration_s)
    result = summarize("rate", rate, samples, max(window - begin - warmup_s, duration_s))
    result.late_sends = late
    return result
