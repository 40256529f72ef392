"""The load generator: closed and open loop, rejects, coordinated omission, CLI outputs."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest
from inference_pipeline.__main__ import main
from inference_pipeline.loadtest.client import LoopbackOnlyError, loopback_address
from inference_pipeline.loadtest.generator import closed_loop, open_loop, request_bodies
from inference_pipeline.serving.models import load_repository
from inference_pipeline_harness.serving_fixtures import (
    TINY_MODEL,
    SlowModel,
    sample_texts,
    threaded_server,
    tiny_repository,
)

PATH = f"/v2/models/{TINY_MODEL}/infer"


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def test_loopback_only():
    assert loopback_address("http://127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert loopback_address("http://localhost:9") == ("localhost", 9)
    for url in ("http://10.1.2.3:80", "https://127.0.0.1:1", "ftp://x"):
        with pytest.raises(LoopbackOnlyError):
            loopback_address(url)


def test_cli_sweep_writes_table_json_and_plot(tmp_path, capsys):
    (model,) = load_repository(tiny_repository())
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(sample_texts(20, seed=7)))
    with threaded_server([model]) as (url, _):
        code = main([
            "loadtest", "--url", url, "--model", TINY_MODEL, "--concurrency", "1,4",
            "--duration", "0.4", "--warmup", "0.1", "--texts", str(texts),
            "--json", str(tmp_path / "out.json"), "--plot", str(tmp_path / "out.png"),
        ])  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    assert "p99 ms" in table and "c=4" in table
    levels = json.loads((tmp_path / "out.json").read_text())["levels"]
    assert [level["level"] for level in levels] == [1, 4]
    for level in levels:
        assert level["successes"] > 0 and level["errors"] == 0 and level["rejects"] == 0
        latency = level["latency_ms"]
        assert latency["p50"] <= latency["p90"] <= latency["p95"] <= latency["p99"]
    assert (tmp_path / "out.png").stat().st_size > 10_000


def test_cli_refuses_remote_targets_and_bad_levels(capsys):
    assert main(["loadtest", "--url", "http://10.0.0.1:80", "--model", "m"]) == 2
    assert main(["loadtest", "--url", "http://127.0.0.1:1", "--model", "m", "--rate", "0"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == [
        "error: 'http://10.0.0.1:80': load tests may only target loopback (127.0.0.1)",
        "error: --rate must be positive",
    ]


def queueing_floor_ms(rate: float, duration_s: float, seed: int, service_s: float) -> list:
    """Each open-loop request's least possible latency: the same Poisson schedule as
    ``open_loop`` into one FIFO server that needs at least ``service_s`` per request."""
    rng, arrivals, t = random.Random(seed), [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t > duration_s:
            break
        arrivals.append(t)
    floors, free_at = [], 0.0
    for arrival in arrivals:
        free_at = max(free_at, arrival) + service_s
        floors.append((free_at - arrival) * 1e3)
    return floors


def test_open_loop_counts_queueing_that_a_closed_loop_hides():
    service_s = 0.03  # capacity at most 33 answers/s: a sleep may run late, never early
    (model,) = load_repository(tiny_repository(), {"max_batch_size": 1})
    slow = SlowModel(model, service_s)
    bodies = request_bodies(sample_texts(8, seed=8), 1)
    with threaded_server([slow]) as (url, _):
        host, port = host_port(url)
        closed = asyncio.run(closed_loop(host, port, PATH, bodies, 1, 0.3, 100, 0.0))
        opened = asyncio.run(open_loop(host, port, PATH, bodies, 60.0, 0.6, 100, 0.0, seed=1))
    assert closed.errors == opened.errors == 0
    floors = queueing_floor_ms(60.0, 0.6, 1, service_s)
    assert opened.requests == len(floors)
    # back to back, each request waits one service time; arrivals at 60/s into a 33/s server
    # queue up, and the open loop reports at least the queueing the schedule implies (a
    # floor: a loaded machine only adds to it) ...
    assert closed.latency_ms["p50"] >= service_s * 1e3
    assert opened.latency_ms["p90"] >= np.percentile(floors, 90) > 4 * service_s * 1e3
    # ... which the closed loop, measured in the same run, does not show
    assert opened.latency_ms["p90"] > 2 * closed.latency_ms["p50"]
    assert opened.throughput <= 1 / service_s


def test_overload_is_counted_as_rejects_not_errors():
    (model,) = load_repository(tiny_repository(), {"max_batch_size": 1, "max_queue_size": 2})
    slow = SlowModel(model, 0.03)
    bodies = request_bodies(sample_texts(8, seed=9), 1)
    with threaded_server([slow]) as (url, _):
        host, port = host_port(url)
        result = asyncio.run(closed_loop(host, port, PATH, bodies, 8, 0.4, 400, 0.0))
    assert result.rejects > 0 and result.errors == 0 and result.successes > 0
    assert result.requests == result.successes + result.rejects
