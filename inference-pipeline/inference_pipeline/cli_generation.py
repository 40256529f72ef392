"""Generation commands: train-gpt, export-gpt, gate-gpt, generate."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path


class BadInput(Exception):
    """A command-line value that cannot work: reported in one line, exit status 2."""


def _command(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    @functools.wraps(run)
    def checked(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except BadInput as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return checked


def _settings(args: argparse.Namespace):
    import torch

    from inference_pipeline.generation.train import TrainSettings

    # One thread: on a shared, oversubscribed CPU a second thread mostly spin-waits (a small
    # model's greedy loop measured ~18x slower with two threads than with one).
    torch.set_num_threads(1)

    try:
        return TrainSettings(steps=args.steps, seconds=args.seconds)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc


def _add_budget(parser: argparse.ArgumentParser) -> None:
    """The training budget names the checkpoint (its cache key), so every command takes it."""
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--steps",
        type=int,
        help="training budget in optimizer steps: the same model on any machine (default 1200)",
    )
    budget.add_argument(
        "--seconds",
        type=float,
        help="training budget in wall-clock seconds instead (what it trains depends on the CPU)",
    )


def run_train(args: argparse.Namespace) -> int:
    from inference_pipeline.generation.model import greedy_no_cache
    from inference_pipeline.generation.train import trained_model

    model, summary, path = trained_model(settings=_settings(args), retrain=args.retrain)
    print(json.dumps(summary, indent=2))
    print(f"checkpoint: {path}")
    sample = bytes(greedy_no_cache(model, b"The government said", 120))
    print("sample (greedy):", (b"The government said" + sample).decode("utf-8", "replace"))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from inference_pipeline.generation.artifacts import load_artifacts
    from inference_pipeline.generation.export import onnx_dims

    artifacts = load_artifacts(settings=_settings(args))
    for path in (artifacts.files.onnx_fp32, artifacts.files.onnx_int8, artifacts.files.program):
        print(f"{path}  ({path.stat().st_size / 1e6:.1f} MB)")
    dims = onnx_dims(artifacts.files.onnx_fp32)
    for name in ("tokens", "positions", "attention_mask", "past_key_0", "logits", "new_key_0"):
        print(f"  {name:16s} {dims[name]}")
    if args.repository is not None:
        from inference_pipeline.generation.served import write_generation_folder

        graph = artifacts.files.onnx_int8 if args.int8 else artifacts.files.onnx_fp32
        folder = write_generation_folder(
            args.repository, graph, artifacts.model.config, args.name, args.max_batch
        )
        print(f"generation model folder: {folder} (serve {args.repository} mounts its routes)")
    return 0


def run_gate(args: argparse.Namespace) -> int:
    from inference_pipeline.generation.artifacts import load_artifacts
    from inference_pipeline.generation.gates import cache_equality_gate, eval_prompts, int8_gates
    from inference_pipeline.generation.model import GPTConfig
    from inference_pipeline.generation.runtime import OrtStep
    from inference_pipeline.generation.train import corpus_bytes

    if args.prompts < 1 or args.new_tokens < 1:
        raise BadInput("--prompts and --new-tokens must be >= 1")
    settings = _settings(args)
    if args.new_tokens >= GPTConfig().max_positions:
        raise BadInput(f"--new-tokens must be < {GPTConfig().max_positions}")
    artifacts = load_artifacts(settings=settings)
    config = artifacts.model.config
    max_prompt = config.max_positions - args.new_tokens
    _, held_out = corpus_bytes()
    fp32 = OrtStep(artifacts.files.onnx_fp32, config)
    int8 = OrtStep(artifacts.files.onnx_int8, config)
    prompts = eval_prompts(held_out, args.prompts, min(max_prompt, 160))
    print(f"cache equality on {len(prompts)} held-out prompts of 1..{max(map(len, prompts))} bytes")
    results = [cache_equality_gate(artifacts.model, fp32, prompts, args.new_tokens, print)]
    agreement, perplexity, figures = int8_gates(fp32, int8, held_out)
    results += [agreement, perplexity]
    for r in results:
        verdict = "PASS" if r.passed else "FAIL"
        print(f"[{verdict}] {r.describe()} {r.detail}")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results] + [figures], indent=2))
    return 0 if all(r.passed for r in results) else 1


def run_generate(args: argparse.Namespace) -> int:
    from inference_pipeline.generation.artifacts import load_artifacts
    from inference_pipeline.generation.engine import ContinuousBatchingEngine
    from inference_pipeline.generation.model import GPTConfig
    from inference_pipeline.generation.requests import GenerationRequest
    from inference_pipeline.generation.runtime import OrtStep
    from inference_pipeline.generation.sampling import SamplingParams

    try:
        request = GenerationRequest(
            args.prompt.encode("utf-8"),
            args.max_new_tokens,
            tuple(s.encode("utf-8") for s in args.stop),
            SamplingParams(args.temperature, args.top_k, args.top_p, args.seed),
        )
    except ValueError as exc:
        raise BadInput(str(exc)) from exc
    settings = _settings(args)
    if len(request.prompt) + request.max_new_tokens > GPTConfig().max_positions:
        raise BadInput(f"prompt bytes + --max-new-tokens must be <= {GPTConfig().max_positions}")
    artifacts = load_artifacts(settings=settings)
    path = artifacts.files.onnx_int8 if args.int8 else artifacts.files.onnx_fp32
    engine = ContinuousBatchingEngine(OrtStep(path, artifacts.model.config))
    handle = engine.submit(request)
    sys.stdout.write(args.prompt)
    while engine.step():
        while not handle.chunks.empty():
            sys.stdout.write(handle.chunks.get().data.decode("utf-8", "replace"))
            sys.stdout.flush()
    print(f"\n[finish: {handle.finish_reason}, {len(handle.tokens)} tokens]")
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train-gpt", help="train (or load the cached) byte-level GPT")
    _add_budget(p)
    p.add_argument("--retrain", action="store_true", help="train even if the checkpoint exists")
    p.set_defaults(run=_command(run_train))

    p = subparsers.add_parser("export-gpt", help="export the GPT with an explicit KV cache")
    _add_budget(p)
    p.add_argument(
        "--repository", type=Path, help="also write a generation model folder into this repository"
    )
    p.add_argument("--name", default="bbc_gpt", help="its model name (default bbc_gpt)")
    p.add_argument("--int8", action="store_true", help="put the INT8 graph in the folder")
    p.add_argument("--max-batch", type=int, default=16, help="continuous batch slots")
    p.set_defaults(run=_command(run_export))

    p = subparsers.add_parser("gate-gpt", help="cache-equality and INT8 gates for the GPT")
    _add_budget(p)
    p.add_argument("--prompts", type=int, default=50)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--json", type=Path, help="write the gate results here")
    p.set_defaults(run=_command(run_gate))

    p = subparsers.add_parser("generate", help="stream a continuation of PROMPT")
    p.add_argument("prompt")
    _add_budget(p)
    p.add_argument("--max-new-tokens", type=int, default=120)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--stop", action="append", default=[], help="stop sequence (repeatable)")
    p.add_argument("--int8", action="store_true", help="use the INT8 graph")
    p.set_defaults(run=_command(run_generate))
