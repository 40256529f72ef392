"""The generation part of the pipeline's report: gates and the batching benchmark.

``build_subsection(out_dir, quick) -> Section``: the offline helper's ``report_section`` merges
its checks, tables, images and headline into the pipeline's section. Full mode uses the
checkpoint trained with ``DEMO_TRAINING`` (trained first if it is not cached) and ONNX Runtime;
quick mode uses a tiny untrained model in eager PyTorch, so it takes seconds and still
measures every mechanism.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from inference_pipeline.generation.engine import ContinuousBatchingEngine
from inference_pipeline.generation.gates import cache_equality_gate, eval_prompts, int8_gates
from inference_pipeline.generation.model import GPT, TINY_CONFIG
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.runtime import OrtStep, TorchStep
from inference_pipeline.generation.train import corpus_bytes
from phase01_common.report import Check, Image, Section, Table

from inference_pipeline_harness.generation_bench import (
    DEMO_TRAINING,
    TARGET_TOKENS_PER_S_SPEEDUP,
    benchmark,
    plot,
    verdict,
)


def _tiny_model() -> GPT:
    torch.manual_seed(0)
    model = GPT(TINY_CONFIG).eval()
    with torch.no_grad():  # clear argmax winners: equality then tests the cache, not ties
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    return model


def _join_check(step, prompts: list[bytes]) -> Check:
    engine = ContinuousBatchingEngine(step, max_num_seqs=4, max_num_batched_tokens=20)
    alone = []
    for prompt in prompts:
        solo = ContinuousBatchingEngine(step, max_num_seqs=1)
        handle = solo.submit(GenerationRequest(prompt, 24))
        solo.run_until_idle()
        alone.append(handle.tokens)
    handles = [engine.submit(GenerationRequest(prompts[0], 24))]
    for _ in range(6):
        engine.step()
    handles += [engine.submit(GenerationRequest(p, 24)) for p in prompts[1:]]
    engine.run_until_idle()
    same = sum(h.tokens == a for h, a in zip(handles, alone, strict=True))
    leaked = engine.cache.num_blocks - engine.cache.free_blocks
    return Check(
        "requests joining a running batch get the tokens they get alone (greedy)",
        same == len(prompts) and leaked == 0,
        f"{same}/{len(prompts)} identical, {leaked} blocks leaked",
    )


def build_subsection(out_dir: Path, quick: bool) -> Section:
    out_dir.mkdir(parents=True, exist_ok=True)
    section = Section("Generation: explicit KV cache, paged blocks, continuous batching")
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if quick:
            model = _tiny_model()
            text = np.frombuffer(
                b"Shares rose after the bank said profits would grow. " * 40, np.uint8
            )
            step = TorchStep(model)
            prompts = eval_prompts(text, 6, 80)
            gate = cache_equality_gate(model, step, prompts, 16)
            concurrencies, per_client, rounds = [16], 2, 1
            model_figure = ("model", "tiny, untrained (quick)")
        else:
            from inference_pipeline.generation.artifacts import load_artifacts

            artifacts = load_artifacts(settings=DEMO_TRAINING)
            model, config = artifacts.model, artifacts.model.config
            _, text = corpus_bytes()
            step = OrtStep(artifacts.files.onnx_fp32, config, threads=1)
            prompts = eval_prompts(text, 50, 160)
            # The no-cache oracle re-runs the whole sequence per new byte (the gate's cost grows
            # with tokens x length); 32 new bytes reach position 192 of 256 over 50 prompts.
            gate = cache_equality_gate(model, step, prompts, 32)
            agreement, perplexity, figures = int8_gates(
                step, OrtStep(artifacts.files.onnx_int8, config, threads=1), text
            )
            for g in (agreement, perplexity):
                section.checks.append(
                    Check(g.name, g.passed, f"{g.value:.4g} ({g.comparison} {g.limit:g})", g.detail)
                )
            section.tables.append(Table(
                "INT8 (dynamic, ONNX Runtime) vs fp32 on held-out BBC text",
                ["perplexity fp32", "perplexity int8", "increase", "next-byte agreement"],
                [[figures["ppl_fp32"], figures["ppl_int8"], figures["ppl_increase"],
                  figures["agreement"]]],
            ))  # fmt: skip
            model_figure = (
                "GPT held-out bits/byte",
                f"{artifacts.summary['held_out_bits_per_byte']:.2f}",
            )
            concurrencies, per_client, rounds = [1, 4, 16], 6, 3
        section.checks.append(
            Check(gate.name, gate.passed, f"{gate.value:g}/{len(prompts)}", gate.detail)
        )
        section.checks.append(_join_check(step, prompts[:4]))
        start = time.perf_counter()
        results = benchmark(step, text, concurrencies, per_client, rounds, progress=lambda _: None)
        bench_seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(torch_threads)
    summary = verdict(results)
    section.checks.append(Check(
        f"continuous >= {TARGET_TOKENS_PER_S_SPEEDUP:g}x static tokens/s at C=16 with p99 ITL "
        "no higher",
        bool(summary["target_met"]),
        f"{summary['tokens_per_s_speedup']:.2f}x the tokens/s of {summary['tokens_per_s_static']}, "
        f"p99 ITL {summary['itl_p99_ratio']:.2f}x that of {summary['itl_p99_static']}",
        f"closed loop, shared 2-core CPU, {bench_seconds:.0f} s",
        benchmark=True,
    ))  # fmt: skip
    columns = ["engine", "clients", "tokens/s", "requests/s", "TTFT p50 ms", "TTFT p99 ms",
               "ITL p50 ms", "ITL p90 ms", "ITL p99 ms", "KV held at peak"]  # fmt: skip
    rows = [[r.engine, r.concurrency, r.tokens_per_s, r.requests_per_s, r.ttft_p50_ms,
             r.ttft_p99_ms, r.itl_p50_ms, r.itl_p90_ms, r.itl_p99_ms, r.cache_peak_share]
            for r in results]  # fmt: skip
    section.tables.append(Table("Continuous vs static batching (same workload)", columns, rows))
    figure = plot(results, out_dir / "generation_batching.png")
    section.images.append(Image(figure, "Tokens/s, TTFT and inter-token latency vs clients"))
    # The pipeline's section shows our first entry: the gate every other figure relies on.
    section.headline = [
        (
            "greedy with KV cache == without (tokens)",
            f"{gate.value}/{len(prompts)} prompts identical",
        ),
        (
            "continuous vs static batching (C=16)",
            f"{summary['tokens_per_s_speedup']:.2f}x tokens/s",
        ),
        model_figure,
    ]
    return section
