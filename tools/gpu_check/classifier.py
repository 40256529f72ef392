"""Step 2: the classifier on CUDA, eager FP32 / FP16 / BF16, SDPA vs eager attention, and
torch.compile with and without CUDA graphs, at batch 1 and 8, sequence 128.

``python -m gpu_check.classifier --out FILE --budget-s N [--dry-run]``

Every variant is first gated against eager FP32 (SDPA) on held-out documents with the
pipeline's own gate profiles (``inference_pipeline.gates``: ``FP32_GATES``, ``FP16_GATES``,
``BF16_GATES``, applied by ``apply_gates`` as the CPU build applies them; the BF16 logit limit
is 8x FP16's, BF16 keeping 3 fewer significand bits). Then it is timed beside the reference, in
interleaved rounds (``phase01_common.timing``): p50/p90/p99 of single calls, the device
synchronized around each (the latency a request sees), and the ratio of the medians. Variants
run in value order (FP16 first after the reference), and a variant that the step's remaining
budget cannot fit is recorded as skipped, so a short lease still returns the first rows.

The gate batches have the timed shapes (batch 8 and batch 1, padded to 128 tokens, each
document its own length inside that), so a compiled variant compiles exactly two graphs (each
row's ``graphs_compiled``: the graphs Dynamo compiled for its variant so far).
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import asdict, dataclass

import numpy as np
import torch
from inference_pipeline.gates import (
    BF16_GATES,
    FP16_GATES,
    FP32_GATES,
    Evaluation,
    GateCheck,
    GateSet,
    apply_gates,
)
from torch._dynamo.utils import counters as dynamo_counters

from gpu_check import minilm
from gpu_check.common import (
    StepArgs,
    StepRecord,
    latency_ms,
    parse_args,
    pick_device,
    run_step,
    time_on_device,
)

BATCHES = (1, 8)
SEQUENCE = 128


@dataclass(frozen=True)
class Variant:
    name: str
    dtype: str  # "fp32", "fp16" or "bf16"
    attention: str  # "sdpa" or "eager"
    compile_mode: str | None = None  # torch.compile's mode; None: eager PyTorch
    estimate_s: float = 5.0  # seconds it needs (gates, timing, compilation) on the H200


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
REFERENCE = Variant("eager_fp32_sdpa", "fp32", "sdpa")
# Value order: what a short lease must bring back first.
VARIANTS = (
    REFERENCE,
    Variant("eager_fp16_sdpa", "fp16", "sdpa"),
    Variant("eager_bf16_sdpa", "bf16", "sdpa"),
    Variant("eager_fp16_eager_attention", "fp16", "eager"),
    Variant("eager_fp32_eager_attention", "fp32", "eager"),
    # Inductor's first compile of a 6-layer encoder, two shapes: tens of seconds on 16 cores.
    Variant("compiled_fp16_default", "fp16", "sdpa", "default", 60.0),
    # Inductor's FX graph cache serves the same graphs again; CUDA graphs are recorded on top.
    Variant("compiled_fp16_reduce_overhead", "fp16", "sdpa", "reduce-overhead", 40.0),
    # Autotuning benchmarks GEMM and attention configurations: the slowest compile.
    Variant("compiled_fp16_max_autotune", "fp16", "sdpa", "max-autotune-no-cudagraphs", 120.0),
)


@dataclass(frozen=True)
class Sizes:
    model: minilm.ModelSize
    train_documents: int
    train_length: int  # longest training document (tokens)
    train_steps: int
    train_batch: int
    train_seconds: float
    lr: float
    gate_documents: int
    alone: int  # gate documents also run alone (batch 1)
    warmup: int
    iterations: dict[int, int]  # batch -> timed calls
    compiled: int  # how many of the compiled variants run (a dry run runs the first)


FULL = Sizes(
    minilm.MINILM_L6, 4096, SEQUENCE, 600, 32, 15.0, 3e-4, 256, 32, 20, {1: 300, 8: 150}, 3
)
# The dry run trains a fixed number of steps (no time cap), so its gates see the same model
# however loaded the machine is.
DRY = Sizes(minilm.TINY, 800, 32, 40, 16, float("inf"), 2e-3, 16, 2, 1, {1: 3, 8: 2}, 1)


@dataclass
class Context:
    """What every variant's measurement shares: the fine-tuned model, the gate documents, and
    the FP32 reference (its model, timed beside every variant, and its outputs)."""

    record: StepRecord
    sizes: Sizes
    device: torch.device
    dry_run: bool
    trained: torch.nn.Module
    gate_docs: minilm.Documents
    gate_set: GateSet
    reference: Evaluation | None = None
    reference_model: torch.nn.Module | None = None


def gate_checks(dtype: str) -> tuple[GateCheck, ...]:
    """The pipeline's gate profile for a compute precision, as the CPU build applies it."""
    return {"fp32": FP32_GATES, "fp16": FP16_GATES, "bf16": BF16_GATES}[dtype]


def outputs(model, docs: minilm.Documents, batch: int, device) -> tuple[np.ndarray, np.ndarray]:
    """(logits, embedding) as float32 NumPy, in batches of ``batch`` (the last one filled up
    to ``batch`` rows with repeats, so that every call has the same shape)."""
    logits, embeddings = [], []
    for start in range(0, len(docs), batch):
        index = torch.arange(start, start + batch) % len(docs)
        # The inputs are made outside inference mode, as the timed ones are: an inference
        # tensor has another dispatch key set, and a compiled graph's guards would compile
        # the same shape again for the timing.
        ids, mask = docs.input_ids[index].to(device), docs.attention_mask[index].to(device)
        with torch.inference_mode():
            out = model(ids, mask)
        keep = min(batch, len(docs) - start)
        logits.append(out[0][:keep].float().cpu().numpy())
        embeddings.append(out[1][:keep].float().cpu().numpy())
    return np.concatenate(logits), np.concatenate(embeddings)


def evaluate(model, docs: minilm.Documents, alone: int, device) -> Evaluation:
    return Evaluation(outputs(model, docs, 8, device), outputs(model, docs[:alone], 1, device))


def prepare(variant: Variant, trained, device, dry_run: bool):
    """The variant's model on ``device``; compiled ones through torch.compile (a dry run uses
    the aot_eager backend: the same tracing, without Inductor's minutes of C++ on 2 cores)."""
    model = minilm.variant(trained, DTYPES[variant.dtype], variant.attention).to(device)
    if variant.compile_mode is None:
        return model, "eager"
    torch._dynamo.reset()  # each compiled variant starts from a clean cache
    if dry_run:
        return torch.compile(model, backend="aot_eager", dynamic=False), "aot_eager (dry run)"
    return torch.compile(model, mode=variant.compile_mode, dynamic=False), "inductor"


def timing_inputs(sizes: Sizes, batch: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` documents of exactly SEQUENCE tokens (no padding)."""
    docs = minilm.make_documents(batch, sizes.model.vocab_size, SEQUENCE, SEQUENCE, seed=7)
    return docs.input_ids.to(device), docs.attention_mask.to(device)


def measure_variant(variant: Variant, context: Context) -> None:
    """Gate ``variant`` against the FP32 reference, then time it at each batch size."""
    record, sizes, device = context.record, context.sizes, context.device
    reference = context.reference
    started = time.perf_counter()
    graphs_before = dynamo_counters["stats"]["unique_graphs"]
    model, backend = prepare(variant, context.trained, device, context.dry_run)
    gates = {}
    if variant != REFERENCE:
        candidate = evaluate(model, context.gate_docs, sizes.alone, device)  # compiles both
        report = apply_gates(
            variant.name, gate_checks(variant.dtype), candidate, reference, context.gate_set
        )
        for result in report.results:
            record.add_check(
                f"{variant.name}: {result.name}", result.value, result.limit, result.comparison
            )
        logit_diff = float(np.max(np.abs(candidate.batched[0] - reference.batched[0])))
        gates = {"gates_passed": report.passed, "max_abs_logit_diff": logit_diff}
    prepared_s = time.perf_counter() - started
    for batch in BATCHES:
        ids, mask = timing_inputs(sizes, batch, device)
        calls = {"reference": lambda ids=ids, mask=mask: context.reference_model(ids, mask)}
        if variant != REFERENCE:  # timed beside the reference, interleaved, in the same run
            calls[variant.name] = lambda ids=ids, mask=mask: model(ids, mask)
        with torch.inference_mode():
            timings = time_on_device(calls, device, sizes.warmup, sizes.iterations[batch])
        name = variant.name if variant != REFERENCE else "reference"
        latency = latency_ms(timings.samples[name])
        row = asdict(variant) | {"status": "ok", "backend": backend, "batch": batch}
        row |= latency | gates
        row["ms_per_row"] = latency["p50_ms"] / batch
        row["speedup_vs_fp32_eager"] = timings.ratio(name, "reference")
        row["fp32_eager_p50_ms_same_run"] = timings.median("reference") * 1e3
        row["gates_and_compile_s"] = round(prepared_s, 2)
        row["graphs_compiled"] = dynamo_counters["stats"]["unique_graphs"] - graphs_before
        record.add_row(row)
        print(
            f"{variant.name:32s} batch {batch}: p50 {latency['p50_ms']:.3f} ms "
            f"p99 {latency['p99_ms']:.3f} ms ({row['speedup_vs_fp32_eager']:.2f}x fp32) "
            f"{gates}",
            flush=True,
        )


def measure(args: StepArgs, record: StepRecord) -> str:
    device = pick_device(args.dry_run)
    sizes = DRY if args.dry_run else FULL
    record.set(device=str(device), sizes=asdict(sizes), sequence=SEQUENCE, batches=list(BATCHES))
    vocab = sizes.model.vocab_size
    train = minilm.make_documents(sizes.train_documents, vocab, sizes.train_length, 8, seed=0)
    gate_docs = minilm.make_documents(sizes.gate_documents, vocab, SEQUENCE, seed=1)
    gate_set = GateSet(texts=[], labels=gate_docs.labels.tolist(), alone=list(range(sizes.alone)))

    begin = time.perf_counter()
    trained = minilm.build_classifier(sizes.model)
    losses = minilm.fine_tune(
        trained, train, sizes.train_steps, sizes.train_batch, device, sizes.train_seconds, sizes.lr
    )
    context = Context(record, sizes, device, args.dry_run, trained, gate_docs, gate_set)
    context.reference_model, _ = prepare(REFERENCE, trained, device, args.dry_run)
    context.reference = reference = evaluate(
        context.reference_model, gate_docs, sizes.alone, device
    )
    record.set(
        fine_tune={
            "steps": len(losses),
            "seconds": round(time.perf_counter() - begin, 2),
            "first_loss": losses[0],
            "last_loss": float(np.mean(losses[-10:])),
            "heldout_accuracy": reference.accuracy(gate_set.labels),
        }
    )
    print(f"fine-tuned: {record.data['fine_tune']}")

    compiled_seen, failed = 0, []
    for variant in VARIANTS:
        if variant.compile_mode is not None:
            compiled_seen += 1
            if compiled_seen > sizes.compiled:
                record.add_row(asdict(variant) | {"status": "skipped", "reason": "dry run"})
                continue
        if not args.dry_run and not record.budget.allows(variant.estimate_s):
            left = record.budget.left()
            reason = f"step budget: {left:.0f} s left, needs ~{variant.estimate_s:g}"
            record.add_row(asdict(variant) | {"status": "skipped", "reason": reason})
            continue
        try:
            measure_variant(variant, context)
        except Exception as exc:
            if variant == REFERENCE:
                raise
            # One variant that fails (a compile mode this torch refuses, say) does not cost
            # the rows of the others; the step ends failed and names it.
            traceback.print_exc()
            error = f"{type(exc).__name__}: {exc}"[:500]
            record.add_row(asdict(variant) | {"status": "failed", "reason": error})
            failed.append(variant.name)
    return f"failed: {', '.join(failed)} raised" if failed else "ok"


def main(argv: list[str] | None = None) -> int:
    args = parse_args("python -m gpu_check.classifier", __doc__.splitlines()[0], argv)
    return run_step("classifier", args, lambda record: measure(args, record))


if __name__ == "__main__":
    sys.exit(main())
