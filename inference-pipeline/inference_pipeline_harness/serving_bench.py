"""Serving benchmark: dynamic batching vs none, batcher overhead, this server vs Ray Serve.

`python -m inference_pipeline bench --serving [REPOSITORY]` (through bench.py) or
`python -m inference_pipeline_harness.serving_bench REPOSITORY`. Every comparison is measured
in one run with its baseline interleaved (the machine is shared), and reported as medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from inference_pipeline.loadtest.cli import run_levels
from inference_pipeline.loadtest.generator import LevelResult

from inference_pipeline_harness.serving_fixtures import (
    free_port,
    server_process,
    stop_gracefully,
    wait_ready,
)

REPOSITORY_ENV = "INFERENCE_PIPELINE_REPOSITORY"
DEFAULT_OUT = Path("report") / "inference-pipeline-serving"


@dataclass
class BenchSettings:
    quick: bool
    duration_s: float
    rounds: int
    sweep: tuple[int, ...]
    ray: bool
    threads: int = 2
    warmup_s: float = 0.5
    texts: int = 400  # BBC dev articles per workload
    overhead_samples: int = 300
    length_aware: bool = True  # also compare length-aware grouping on mixed lengths
    stages: bool = True  # per-stage times at c=16, batched/unbatched x shared/pinned cores
    # with rounds == 1: the sweep's c=16 level is the batching comparison's short-text window
    # (the same measurement: same servers, texts, concurrency and window), not timed again
    sweep_reuses_c16: bool = False


@dataclass
class BenchResults:
    model: str
    model_note: str
    settings: dict
    batching: dict = field(
        default_factory=dict
    )  # workload -> {"batched": [...], "unbatched": [...]}
    sweep: dict = field(default_factory=dict)  # series -> [LevelResult dict]
    overhead: dict = field(default_factory=dict)
    ray: dict = field(default_factory=dict)
    length_aware: dict = field(default_factory=dict)  # mixed lengths: on vs off
    stages: dict = field(default_factory=dict)  # placement -> config -> per-request stage ms
    machine: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def log(message: str) -> None:
    print(f"[serving bench] {message}", file=sys.stderr, flush=True)


def choose_model(repository: Path) -> tuple[str, str]:
    """The manifest's promoted default (the build's fastest at batch 8), else the promoted
    INT8 variant with the lowest batch-1 latency, else FP32 (said)."""
    folders = sorted(p.name for p in repository.iterdir() if (p / "config.pbtxt").is_file())
    if not folders:
        raise FileNotFoundError(f"{repository}: no model folder with a config.pbtxt")
    manifest_path = repository / "manifest.json"
    latency: dict[str, float] = {}
    served = None
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        served = (manifest.get("default_variant") or {}).get("served")
        for variant in manifest.get("variants", []):
            figures = variant.get("latency_ms_seq128_1_thread") or {}
            value = figures.get("batch1_p50") if isinstance(figures, dict) else None
            if variant.get("promoted") and isinstance(value, int | float):
                latency[variant["name"]] = float(value)
    if served in folders:
        return served, f"{served}: the promoted default (fastest measured at batch 8)"
    # only promoted variants get a folder, so every folder here passed its gates
    checked = "promoted" if manifest_path.is_file() else "no manifest: gates not checked"
    int8 = [name for name in folders if "int8" in name]
    if int8:
        best = min(int8, key=lambda name: latency.get(name, float("inf")))
        return best, f"{best}: the fastest INT8 variant ({checked})"
    fp32 = [name for name in folders if "fp32" in name] or folders
    best = min(fp32, key=lambda name: latency.get(name, float("inf")))
    return best, f"{best}: no INT8 variant in the repository, so FP32 ({checked})"


def workloads(max_texts: int) -> dict[str, list[str]]:
    """BBC News dev articles: titles (short) and bodies (the server truncates at 256 tokens)."""
    from phase01_common.bbc_news import load_bbc_news

    articles = load_bbc_news().dev_texts[:max_texts]
    titles = [a.splitlines()[0].strip() for a in articles]
    # 300 words is past 256 tokens for any article; the server's tokenizer truncates exactly.
    bodies = [" ".join(a.split("\n", 1)[-1].split()[:300]) for a in articles]
    return {"short": titles, "long": bodies}


def measure(url: str, model: str, texts: list[str], concurrency: int, s: BenchSettings):
    (result,) = run_levels(
        url, model, texts, [concurrency], duration_s=s.duration_s, warmup_s=s.warmup_s,
        progress=False,
    )  # fmt: skip
    return result


def server_counters(url: str) -> tuple[float, float, float]:
    """(rows, executions, compute seconds) so far, from the server's /metrics."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()

    def total(name: str) -> float:
        return sum(float(v) for v in re.findall(name + r"\{[^}]*\} ([0-9.e+-]+)", text))

    names = ("inference_count_total", "inference_exec_count_total", "inference_compute_seconds_sum")
    return tuple(total(n) for n in names)


def measure_with_batches(url: str, model: str, texts: list[str], concurrency: int, s):
    """One level, plus the average batch size and model time per row the server saw."""
    before = server_counters(url)
    result = measure(url, model, texts, concurrency, s)
    rows, executions, compute = (b - a for a, b in zip(before, server_counters(url), strict=True))
    return result, {
        "avg_batch": rows / executions if executions else 0.0,
        "compute_ms_per_row": compute / rows * 1e3 if rows else 0.0,
    }


def stage_counters(url: str) -> dict[str, float]:
    """From the server's /metrics: seconds summed per serving stage, the requests answered
    and the seconds they spent inside the server, rows and executions."""
    import re
    import urllib.request

    from inference_pipeline.serving.metrics import STAGES

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()

    def total(pattern: str) -> float:
        return sum(float(v) for v in re.findall(pattern + r"[^}]*\} ([0-9.e+-]+)", text))

    out = {
        stage: total(rf'inference_stage_seconds_sum\{{[^}}]*stage="{stage}"') for stage in STAGES
    }
    out["requests"] = total(r"inference_request_seconds_count\{")
    out["in_server"] = total(r"inference_request_seconds_sum\{")
    out["rows"] = total(r"inference_count_total\{")
    out["executions"] = total(r"inference_exec_count_total\{")
    return out


def _threads_of(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


def pin(pid: int, cores: set[int]) -> None:
    """Every thread of process ``pid`` onto ``cores`` (threads made later inherit it)."""
    for tid in _threads_of(pid):
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


# The stage breakdown's servers: the model on 1 thread (the batched one, and the same with
# "--max-batch-size 1").
STAGE_FLAGS = ("--threads", "1", "--log-level", "warning")


def stage_breakdown(
    folder: Path,
    name: str,
    texts: list[str],
    s: BenchSettings,
    servers: dict[str, tuple[str, int]] | None = None,
) -> dict:
    """Where a request's time goes at concurrency 16, batched vs max_batch_size 1, with the
    load generator sharing the server's cores ("shared") and with the server on core 0 and
    the load generator (this process) on core 1 ("pinned"), interleaved round by round.
    Both servers run the model on 1 thread, so the placements differ only in who shares
    the cores. Figures are ms per answered request (batch stages: the batch's time / its
    requests, the CPU each request costs); "batch wall" is a batch's whole time (what each of
    its requests waits); "other in server" is the in-server time left (waiting for the event
    loop to resume the request after its batch, or for a worker thread). ``servers``
    (config -> (url, pid)) are servers started with ``STAGE_FLAGS`` (the unbatched one with
    "--max-batch-size 1"); without them the two are started here. Figures are counter deltas
    around each window, so servers that already served load measure the same."""
    from inference_pipeline.serving.metrics import STAGES

    if servers is None:
        with (
            server_process(folder, *STAGE_FLAGS) as (batched_url, batched),
            server_process(folder, *STAGE_FLAGS, "--max-batch-size", "1") as (unbatched_url, un),
        ):
            servers = {"batched": (batched_url, batched.pid), "unbatched": (unbatched_url, un.pid)}
            return stage_breakdown(folder, name, texts, s, servers)
    cores = sorted(os.sched_getaffinity(0))
    placements = ["shared"] + (["pinned"] if len(cores) >= 2 else [])
    if len(placements) == 1:
        log("stage breakdown: one core only, so no pinned placement")
    measured: dict[str, dict[str, list[dict]]] = {
        p: {"batched": [], "unbatched": []} for p in placements
    }
    try:
        for index in range(s.rounds):
            for placement in placements if index % 2 == 0 else placements[::-1]:
                for config, (url, pid) in servers.items():
                    if placement == "pinned":
                        pin(pid, {cores[0]})
                        pin(os.getpid(), {cores[1]})
                    else:
                        pin(pid, set(cores))
                        pin(os.getpid(), set(cores))
                    before = stage_counters(url)
                    result = measure(url, name, texts, 16, s)
                    after = stage_counters(url)
                    delta = {k: after[k] - before[k] for k in after}
                    measured[placement][config].append({"result": result, "delta": delta})
            log(f"stage breakdown round {index + 1}/{s.rounds} done")
    finally:
        for _, pid in servers.values():
            pin(pid, set(cores))
        pin(os.getpid(), set(cores))
    out: dict[str, dict] = {}
    for placement, configs in measured.items():
        out[placement] = {}
        for config, runs in configs.items():
            per_run = []
            for run in runs:
                d = run["delta"]
                requests = max(d["requests"], 1.0)
                ms = {stage: d[stage] / requests * 1e3 for stage in STAGES}
                # every request of a batch waits for the whole batch, not its share
                batch = sum(d[k] for k in ("pad", "model", "split"))
                ms["batch wall"] = batch / max(d["executions"], 1.0) * 1e3
                waited = sum(ms[k] for k in ("parse", "tokenize", "queue", "encode"))
                ms["other in server"] = d["in_server"] / requests * 1e3 - waited - ms["batch wall"]
                ms["throughput"] = run["result"].throughput
                ms["client p50"] = run["result"].latency_ms.get("p50", float("nan"))
                ms["avg batch"] = d["rows"] / d["executions"] if d["executions"] else 0.0
                per_run.append(ms)
            out[placement][config] = {
                key: statistics.median(r[key] for r in per_run) for key in per_run[0]
            }
        batched, unbatched = out[placement]["batched"], out[placement]["unbatched"]
        out[placement]["batching ratio"] = batched["throughput"] / unbatched["throughput"]
    return out


def summary(results: list[LevelResult], batches: list[dict] | None = None) -> dict:
    """Medians over rounds of throughput and latency percentiles (and batch figures)."""
    extra = {}
    for key in ("avg_batch", "compute_ms_per_row"):
        if batches:
            extra[key] = statistics.median(b[key] for b in batches)
    return extra | {
        "throughput": statistics.median(r.throughput for r in results),
        "p50": statistics.median(r.latency_ms.get("p50", float("nan")) for r in results),
        "p99": statistics.median(r.latency_ms.get("p99", float("nan")) for r in results),
        "errors": sum(r.errors + r.rejects for r in results),
        "rounds": len(results),
    }


def batching_comparison(urls: dict[str, str], model: str, loads: dict, s: BenchSettings) -> dict:
    """Batched vs max_batch_size 1 at concurrency 16, interleaved round by round."""
    out = {}
    for workload, texts in loads.items():
        rounds: dict[str, list[LevelResult]] = {"batched": [], "unbatched": []}
        batches: dict[str, list[dict]] = {"batched": [], "unbatched": []}
        for index in range(s.rounds):
            order = ("batched", "unbatched") if index % 2 == 0 else ("unbatched", "batched")
            for config in order:
                result, seen = measure_with_batches(urls[config], model, texts, 16, s)
                rounds[config].append(result)
                batches[config].append(seen)
            log(f"{workload} round {index + 1}: " + ", ".join(
                f"{c} {rounds[c][-1].throughput:.1f}/s (batch {batches[c][-1]['avg_batch']:.1f})"
                for c in rounds))  # fmt: skip
        out[workload] = {c: summary(results, batches[c]) for c, results in rounds.items()}
        out[workload]["raw"] = {c: [r.as_dict() for r in rs] for c, rs in rounds.items()}
    return out


def length_aware_comparison(urls: dict[str, str], model: str, loads: dict, s: BenchSettings):
    """Mixed titles and bodies at c=16: length-aware grouping on vs off (same batch size)."""
    mixed = [text for pair in zip(loads["short"], loads["long"], strict=False) for text in pair]
    rounds: dict[str, list[LevelResult]] = {name: [] for name in urls}
    for index in range(s.rounds):
        for name in urls if index % 2 == 0 else reversed(list(urls)):
            rounds[name].append(measure(urls[name], model, mixed, 16, s))
    log("length-aware: " + ", ".join(f"{n} {r[-1].throughput:.1f}/s" for n, r in rounds.items()))
    return {name: summary(results) for name, results in rounds.items()}


def concurrency_sweep(
    urls: dict[str, str],
    model: str,
    texts: list[str],
    s: BenchSettings,
    known: dict[int, dict[str, LevelResult]] | None = None,
):
    """Each level on each server; ``known`` (concurrency -> server -> window) holds levels
    already measured on these servers with these texts and settings, used as they are."""
    known = known or {}
    series: dict[str, list[LevelResult]] = {name: [] for name in urls}
    for concurrency in s.sweep:
        for name, url in urls.items():
            window = known.get(concurrency, {}).get(name)
            series[name].append(window or measure(url, model, texts, concurrency, s))
        log(f"sweep c={concurrency}: " + ", ".join(
            f"{n} {series[n][-1].throughput:.1f}/s" for n in series))  # fmt: skip
    return series


def batcher_overhead(folder: Path, texts: list[str], threads: int) -> dict:
    """p50 of one text through the batcher (delay 0, and the repository's 2 ms) vs the same
    call made directly, interleaved text by text so machine noise hits all alike."""
    from inference_pipeline.serving.batcher import DynamicBatcher
    from inference_pipeline.serving.models import load_repository

    (model,) = load_repository(folder, {"max_queue_delay_us": 0, "instance_count": 1}, threads)
    delayed = model.batching.__class__(**{**asdict(model.batching), "max_queue_delay_us": 2000})

    def direct(text: str) -> float:
        begin = time.perf_counter()
        prepared = model.prepare({"TEXT": np.array([text], dtype=object)})
        model.run_batch(0, [prepared.data])
        return time.perf_counter() - begin

    async def through(batcher: DynamicBatcher, text: str) -> float:
        begin = time.perf_counter()
        prepared = model.prepare({"TEXT": np.array([text], dtype=object)})
        await batcher.submit(prepared.data, prepared.rows, prepared.length)
        return time.perf_counter() - begin

    async def run() -> dict[str, list[float]]:
        batchers = {
            "batcher": DynamicBatcher(model.batching, model.run_batch),
            "batcher_delay_2ms": DynamicBatcher(delayed, model.run_batch),
        }
        for batcher in batchers.values():
            await batcher.start()
        times: dict[str, list[float]] = {"direct": [], **{name: [] for name in batchers}}
        for text in texts[:10]:  # warm-up
            direct(text)
        for text in texts:  # interleaved so machine noise hits all three alike
            times["direct"].append(direct(text))
            for name, batcher in batchers.items():
                times[name].append(await through(batcher, text))
        for batcher in batchers.values():
            await batcher.close()
        return times

    times = asyncio.run(run())
    per_text = compute_per_text(model, texts[:96])
    p50 = {name: float(np.median(values) * 1e3) for name, values in times.items()}
    return {
        "p50_ms": p50,
        "overhead_ms": p50["batcher"] - p50["direct"],
        "overhead_with_delay_ms": p50["batcher_delay_2ms"] - p50["direct"],
        "samples": len(texts),
        "compute_per_text_ms": per_text,
    }


def compute_per_text(model, texts: list[str], rounds: int = 3) -> dict[str, float]:
    """Model time per text at batch 1 and batch 8 (no server): what batching can buy at most."""
    prepared = [model.prepare({"TEXT": np.array([t], dtype=object)}).data for t in texts]
    costs: dict[str, list[float]] = {"batch 1": [], "batch 8": []}
    for _ in range(rounds):  # interleaved, medians: the machine is shared
        begin = time.perf_counter()
        for item in prepared:
            model.run_batch(0, [item])
        costs["batch 1"].append((time.perf_counter() - begin) / len(prepared))
        begin = time.perf_counter()
        for start in range(0, len(prepared), 8):
            model.run_batch(0, prepared[start : start + 8])
        costs["batch 8"].append((time.perf_counter() - begin) / len(prepared))
    return {name: float(np.median(values) * 1e3) for name, values in costs.items()}


def ray_comparison(folder: Path, model: str, texts: list[str], ours_url: str, s: BenchSettings):
    """Ray Serve (1 replica, same batch settings) vs this server at concurrency 16."""
    import subprocess

    port = free_port()
    command = [sys.executable, "-m", "inference_pipeline", "serve", str(folder), "--ray",
               "--replicas", "1", "--port", str(port), "--threads", str(s.threads)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout_s=180, process=process)
        rounds: dict[str, list[LevelResult]] = {"this server": [], "Ray Serve": []}
        for _ in range(s.rounds):
            rounds["Ray Serve"].append(measure(url, model, texts, 16, s))
            rounds["this server"].append(measure(ours_url, model, texts, 16, s))
        log("ray: " + ", ".join(f"{n} {r[-1].throughput:.1f}/s" for n, r in rounds.items()))
        return {name: summary(results) for name, results in rounds.items()}
    finally:
        stop_gracefully(process, 120)


def run_bench(
    repository: Path, s: BenchSettings, loads: dict[str, list[str]] | None = None
) -> BenchResults:
    """Every measurement; ``loads`` replaces the BBC workloads (tests use toy texts)."""
    name, note = choose_model(repository)
    folder = repository / name
    log(f"model {note}; {os.cpu_count()} cores, shared")
    loads = loads or workloads(s.texts)
    results = BenchResults(model=name, model_note=note, settings=asdict(s))
    results.machine = f"{os.cpu_count()} CPU cores shared with other jobs; {s.threads} ORT threads"
    results.overhead = batcher_overhead(
        folder, loads["short"][: 100 if s.quick else 300], s.threads
    )
    log(f"batcher overhead p50: {results.overhead['overhead_ms']:.3f} ms")
    flags = ("--threads", str(s.threads), "--log-level", "warning")
    # Servers started with the stage breakdown's flags serve it too (its figures are counter
    # deltas per window), so it starts no servers of its own.
    shared_stages = s.stages and flags == STAGE_FLAGS
    with (
        server_process(folder, *flags) as (batched_url, batched),
        server_process(folder, *flags, "--max-batch-size", "1") as (unbatched_url, unbatched),
    ):
        urls = {"batched": batched_url, "unbatched": unbatched_url}
        results.batching = batching_comparison(urls, name, loads, s)
        known = {}
        if s.sweep_reuses_c16 and s.rounds == 1:
            raw = results.batching["short"]["raw"]
            known[16] = {config: LevelResult(**raw[config][-1]) for config in urls}
        sweep = concurrency_sweep(urls, name, loads["short"], s, known)
        results.sweep = {n: [r.as_dict() for r in rs] for n, rs in sweep.items()}
        if s.length_aware:
            with server_process(folder, *flags, "--no-length-aware") as (plain_url, _):
                pair = {"length-aware": batched_url, "not length-aware": plain_url}
                results.length_aware = length_aware_comparison(pair, name, loads, s)
        if s.ray:
            results.ray = ray_comparison(folder, name, loads["short"], batched_url, s)
        if shared_stages:
            pids = {
                "batched": (batched_url, batched.pid),
                "unbatched": (unbatched_url, unbatched.pid),
            }
            results.stages = stage_breakdown(folder, name, loads["short"], s, pids)
    if s.stages and not shared_stages:
        results.stages = stage_breakdown(folder, name, loads["short"], s)
    return results


def find_repository(explicit: str | None) -> Path:
    """REPOSITORY, else ${INFERENCE_PIPELINE_REPOSITORY}, else the offline bench's cached
    full build (made on first use, as `python -m inference_pipeline bench` does)."""
    candidate = explicit or os.environ.get(REPOSITORY_ENV)
    if not candidate:
        from inference_pipeline.pipeline import build_cached

        return build_cached(progress=log).repository
    path = Path(candidate)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such model repository")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serving bench", description=__doc__)
    parser.add_argument("repository", nargs="?", help=f"model repository (or ${REPOSITORY_ENV})")
    parser.add_argument("--quick", action="store_true", help="short levels, one round, no Ray")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument(
        "--stages-only", action="store_true",
        help="only where the time goes at c=16 (batched/unbatched x shared/pinned cores)",
    )  # fmt: skip
    parser.add_argument("--model", help="the model folder to serve (default: as choose_model)")
    args = parser.parse_args(argv)
    try:
        repository = find_repository(args.repository)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.model and not (repository / args.model / "config.pbtxt").is_file():
        print(f"error: {repository / args.model}: no model folder there", file=sys.stderr)
        return 2
    settings = bench_settings(args.quick, ray=not args.no_ray)
    # SIGTERM unwinds like Ctrl-C, so the servers this bench started are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.stages_only:
        from inference_pipeline_harness.serving_report import STAGE_COLUMNS, stage_rows

        name = args.model or choose_model(repository)[0]
        stages = stage_breakdown(
            repository / name, name, workloads(settings.texts)["short"], settings
        )
        results = BenchResults(
            model=name, model_note=name, settings=asdict(settings), stages=stages
        )
        gains = [f"{placement} {c['batching ratio']:.2f}x" for placement, c in stages.items()]
        print(f"{name}: batching gain " + ", ".join(gains))
        for row in [STAGE_COLUMNS, *stage_rows(results)]:
            print(" | ".join(str(cell) for cell in row))
        return 0
    results = run_bench(repository, settings)
    from inference_pipeline_harness.serving_report import write_outputs

    for line in write_outputs(results, args.out):
        print(line)
    return 0


def build_subsection(
    out_dir: Path, quick: bool, repository: Path | None = None, smoke: bool = False
):
    """The serving part of the inference-pipeline report (a phase01_common Section).

    ``repository`` defaults to ${INFERENCE_PIPELINE_REPOSITORY}; the quick variant runs one
    short round of 1-second windows without Ray on 3 servers, the full one is `make bench`;
    ``smoke`` (the quick demo's) runs ``bench_settings(smoke=True)``.
    """
    from inference_pipeline_harness.serving_report import section_from_results, write_outputs

    repository = find_repository(str(repository) if repository else os.environ.get(REPOSITORY_ENV))
    settings = bench_settings(quick, ray=not quick, smoke=smoke)
    results = run_bench(repository, settings)
    write_outputs(results, out_dir)
    return section_from_results(results, out_dir)


def bench_settings(quick: bool, ray: bool = True, smoke: bool = False) -> BenchSettings:
    """The full bench, its quick variant (`--quick`, the full demo's short run), or the smoke
    run of the quick demo (the quick variant from shorter windows). Both short variants run
    the model on 1 thread, the stage breakdown's, so the stage breakdown reuses the two main
    servers (3 servers started, not 5), and their single round's sweep takes its c=16 level
    from the batching comparison's short-text window (the same measurement)."""
    if smoke:
        return BenchSettings(quick=True, duration_s=0.6, rounds=1, sweep=(1, 4, 16), ray=False,
                             threads=1, warmup_s=0.3, texts=200, overhead_samples=100,
                             sweep_reuses_c16=True)  # fmt: skip
    if quick:
        return BenchSettings(quick=True, duration_s=1.0, rounds=1, sweep=(1, 4, 16), ray=False,
                             threads=1, texts=200, overhead_samples=100,
                             sweep_reuses_c16=True)  # fmt: skip
    return BenchSettings(quick=False, duration_s=6.0, rounds=3, sweep=(1, 2, 4, 8, 16, 32), ray=ray)


if __name__ == "__main__":
    sys.exit(main())
