"""`serve` and `loadtest`: the v2 inference server and its perf_analyzer-style load generator."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def batching_overrides(args: argparse.Namespace) -> dict[str, object]:
    """Command-line batching flags (None = keep config.pbtxt's value)."""
    return {
        "max_batch_size": args.max_batch_size,
        "preferred_batch_sizes": args.preferred_batch_size,
        "max_queue_delay_us": args.max_queue_delay_us,
        "max_queue_size": args.max_queue_size,
        "default_timeout_us": args.timeout_us,
        "priority_levels": args.priority_levels,
        "length_aware": args.length_aware,
        "length_bucket_ratio": args.length_bucket_ratio,
        "instance_count": args.instances,
    }


def run_serve(args: argparse.Namespace) -> int:
    from inference_pipeline.repository import RepositoryError
    from inference_pipeline.serving.backends import BackendError
    from inference_pipeline.serving.metrics import configure_json_logging
    from inference_pipeline.serving.models import load_model, repository_folders

    configure_json_logging(args.log_level)
    overrides = batching_overrides(args)
    try:
        v2_folders, gpt_folders = repository_folders(Path(args.repository))
        models = [load_model(f, overrides, args.threads, proto) for f, proto in v2_folders]
    except (RepositoryError, BackendError) as exc:
        return _fail(str(exc))
    gpt_folders += [Path(folder) for folder in args.generation or []]
    if not models and not gpt_folders:
        return _fail(f"{args.repository}: no model to serve")
    if args.ray and gpt_folders:
        return _fail("generation models are served by the v2 server only (drop --ray)")
    if args.ray:
        from inference_pipeline.serving.ray_env import use_private_ray_environment

        if args.ray_address is None:
            use_private_ray_environment()
        from inference_pipeline.serving.ray_deployment import run_ray_serve

        return run_ray_serve(args.repository, overrides, args)
    services = []
    if gpt_folders:
        from inference_pipeline.generation.served import (
            GenerationFolderError,
            load_generation_service,
        )

        try:
            services = [
                load_generation_service(
                    f,
                    args.threads or 1,
                    max_num_seqs=args.max_num_seqs,
                    max_num_batched_tokens=args.max_num_batched_tokens,
                    admission_delay_factor=args.admission_delay_factor,
                )  # fmt: skip
                for f in gpt_folders
            ]
        except GenerationFolderError as exc:
            return _fail(str(exc))
    from inference_pipeline.serving.runner import run_server

    try:
        return run_server(
            models, args.host, args.port, args.max_request_bytes, args.graceful_timeout, services
        )
    except OSError as exc:  # port in use, bad host
        return _fail(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc})")


def run_loadtest(args: argparse.Namespace) -> int:
    from inference_pipeline.loadtest.cli import run

    return run(args)


def _add_serve(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="serve a model repository on the v2 inference protocol with dynamic batching",
        description="Serve MODEL_REPOSITORY (Triton layout) over HTTP, KServe/Open Inference "
        "Protocol v2. Batching flags override each model's config.pbtxt.",
    )
    serve.add_argument("repository", metavar="MODEL_REPOSITORY")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port (logged)")
    group = serve.add_argument_group("dynamic batching (overrides config.pbtxt)")
    group.add_argument("--max-batch-size", type=int)
    group.add_argument("--preferred-batch-size", type=_int_list, help="e.g. 4,8")
    group.add_argument("--max-queue-delay-us", type=int)
    group.add_argument("--max-queue-size", type=int, help="requests; a full queue answers 503")
    group.add_argument("--timeout-us", type=int, help="default per-request queue timeout")
    group.add_argument("--priority-levels", type=int)
    group.add_argument("--length-aware", action=argparse.BooleanOptionalAction, default=None)
    group.add_argument("--length-bucket-ratio", type=float)
    group.add_argument("--instances", type=int, help="parallel model instances")
    serve.add_argument("--threads", type=int, help="intra-op threads per instance")
    serve.add_argument(
        "--generation",
        action="append",
        metavar="DIR",
        help="also serve this generation model folder (export-gpt --repository writes one; "
        'folders with backend: "generation" inside MODEL_REPOSITORY are served anyway)',
    )
    scheduler = serve.add_argument_group("generation scheduler (overrides the GPT's config.pbtxt)")
    scheduler.add_argument(
        "--max-num-seqs", type=int, help="sequences running at once (the decode batch cap)"
    )
    scheduler.add_argument(
        "--max-num-batched-tokens",
        type=int,
        help="tokens per engine step, decodes first then prefill chunks: smaller keeps "
        "inter-token latency flat, larger gives a faster first token",
    )
    scheduler.add_argument(
        "--admission-delay-factor",
        type=float,
        help="admit new requests once the oldest has waited this many last-prefill latencies "
        "(0: at every step): larger batches admissions, fewer prefill stalls for running "
        "streams, a later first token",
    )
    serve.add_argument("--max-request-bytes", type=int, default=4 * 1024 * 1024)
    serve.add_argument("--graceful-timeout", type=float, default=60.0, help="seconds")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    ray = serve.add_argument_group("Ray Serve scale-out")
    ray.add_argument("--ray", action="store_true", help="serve on a Ray Serve deployment")
    ray.add_argument("--replicas", type=int, default=1, help="Ray Serve num_replicas")
    ray.add_argument("--ray-address", help="join this Ray cluster instead of starting one")
    ray.add_argument("--ray-cpus", type=int, default=2, help="CPUs of a local Ray")
    serve.set_defaults(run=run_serve)


def _add_loadtest(subparsers: argparse._SubParsersAction) -> None:
    load = subparsers.add_parser(
        "loadtest",
        help="perf_analyzer-style load test of a v2 server (loopback only)",
        description="Closed-loop concurrency sweep (--concurrency) or open-loop Poisson "
        "arrivals (--rate; latency from the intended send time). Reports throughput, "
        "p50/p90/p95/p99, errors and rejects per level as a table, JSON and a plot.",
    )
    load.add_argument("--url", required=True, help="e.g. http://127.0.0.1:8000 (loopback only)")
    load.add_argument("--model", required=True)
    load.add_argument("--concurrency", type=_int_list, help="e.g. 1,2,4,8,16,32")
    load.add_argument("--rate", type=float, action="append", help="requests/s (repeatable)")
    load.add_argument("--duration", type=float, default=5.0, help="seconds per level (max 120)")
    load.add_argument("--max-requests", type=int, default=20000, help="per level")
    load.add_argument("--warmup", type=float, default=0.5, help="seconds per level, not measured")
    load.add_argument("--texts", help="file with one input text per line (default: built in)")
    load.add_argument("--batch", type=int, default=1, help="texts per request")
    load.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    load.add_argument("--json", dest="json_path", help="write the results here")
    load.add_argument("--plot", dest="plot_path", help="latency-vs-throughput plot (PNG)")
    load.add_argument("--seed", type=int, default=0)
    gen = load.add_argument_group("generation (a GPT's OpenAI /v1/completions route)")
    gen.add_argument(
        "--generate",
        action="store_true",
        help="stream from /v1/completions (model MODEL): TTFT, TPOT, inter-token and "
        "end-to-end latency (mean/p50/p99), tokens/s, requests/s and goodput per "
        "--concurrency level (--texts: prompts)",
    )
    gen.add_argument("--max-tokens", type=int, default=32, help="tokens per stream")
    gen.add_argument("--slo-ttft-ms", type=float, default=250.0, help="goodput's TTFT limit")
    gen.add_argument("--slo-tpot-ms", type=float, default=25.0, help="goodput's TPOT limit")
    load.set_defaults(run=run_loadtest)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `serve` and `loadtest` (called by __main__)."""
    _add_serve(subparsers)
    _add_loadtest(subparsers)
