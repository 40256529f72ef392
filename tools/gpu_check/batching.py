"""Step 3: the dynamic batcher in front of the CUDA classifier: the serving benchmark's short
sweep (concurrency 1, 4, 16), batched against no batching.

``python -m gpu_check.batching --out FILE --budget-s N [--dry-run]``

In one process: C closed-loop clients (each sends its next request when the last is answered)
submit one 128-token document at a time to ``DynamicBatcher``, whose worker runs the batch on
the GPU (FP16, SDPA, the same MiniLM-L6 architecture, randomly initialised: timings depend on
the shapes alone). "batched" has the model repository's settings (max batch 32, preferred
4/8/16, 2 ms queue delay); "unbatched" the same with max batch 1. The two alternate level by
level, so drift hits both alike. Reported per level: requests/s, latency p50/p90/p99, the mean
batch the batcher formed and the model time per batch; and the throughput ratio at each
concurrency. On a GPU a batch of 8 costs about what a batch of 1 costs, which is what batching
is for. Two checks: every answer carries the fingerprint of its own document's tokens (no
request gets another's row), and its logits equal that document's run alone within the FP16
gate's 1e-2 (batching changes no answer beyond FP16 rounding).
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from inference_pipeline.gates import GATES

from gpu_check import minilm, project_apis
from gpu_check.common import (
    StepArgs,
    StepRecord,
    latency_ms,
    parse_args,
    pick_device,
    run_step,
    time_on_device,
)

SEQUENCE = 128
CONCURRENCY = (1, 4, 16)
CONFIGS = ("batched", "unbatched")


@dataclass(frozen=True)
class Sizes:
    model: minilm.ModelSize
    documents: int
    seconds_per_level: float
    warmup_s: float
    model_time_rounds: int  # interleaved rounds timing the model alone at batch 1 and 8


FULL = Sizes(minilm.MINILM_L6, 256, 3.0, 0.5, 50)
# The dry run's levels exercise the loop, they measure nothing: 0.1 s still holds a dozen
# requests or more at each level on a loaded 2-core machine (and a level's batcher runs flat out
# on one core, so its seconds are CPU-seconds).
DRY = Sizes(minilm.TINY, 16, 0.1, 0.02, 3)


class Model:
    """``run_batch(instance, payloads)`` for the batcher: payloads are document indices; the
    rows are stacked and run in FP16 on the device, and each caller gets its row's logits
    with a fingerprint of the token ids that row held (computed on the device from the batch),
    so an answer routed to the wrong request is caught exactly."""

    def __init__(self, docs: minilm.Documents, size: minilm.ModelSize, device) -> None:
        network = minilm.build_classifier(size)
        self.model = minilm.variant(network, torch.float16, "sdpa").to(device)
        self.docs = docs
        self.device = device
        self.weights = torch.arange(1, docs.input_ids.shape[1] + 1, device=device)

    def fingerprints(self, ids: torch.Tensor) -> torch.Tensor:
        return (ids * self.weights).sum(dim=1)

    def run(self, indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        ids = self.docs.input_ids[indices].to(self.device)
        mask = self.docs.attention_mask[indices].to(self.device)
        with torch.inference_mode():
            logits = self.model(ids, mask)[0].float()
        return self.fingerprints(ids).cpu().numpy(), logits.cpu().numpy()

    def run_batch(self, instance: int, payloads: list[int]) -> list[tuple[int, np.ndarray]]:
        fingerprints, logits = self.run(payloads)
        return list(zip(fingerprints.tolist(), logits, strict=True))


async def closed_loop(
    model: Model, batched: bool, concurrency: int, seconds: float, warmup_s: float
) -> tuple[dict, list[tuple[int, np.ndarray]]]:
    """``concurrency`` clients for ``warmup_s`` + ``seconds``; the level's figures (the warm-up
    requests excluded) and every (document, answer) pair seen."""
    counter = project_apis.BatchCounter()
    batcher = project_apis.new_batcher(
        project_apis.batching_settings(batched), model.run_batch, counter
    )
    await batcher.start()
    answers: list[tuple[int, np.ndarray]] = []
    latencies: list[float] = []
    begin = time.perf_counter()
    measure_from, stop_at = begin + warmup_s, begin + warmup_s + seconds
    counted = {"executions": 0, "rows": 0, "compute_s": 0.0}

    async def client(number: int) -> None:
        doc = number
        while True:
            sent = time.perf_counter()
            if sent >= stop_at:
                return
            answer = await project_apis.submit(batcher, doc % len(model.docs), SEQUENCE)
            done = time.perf_counter()
            answers.append((doc % len(model.docs), answer))
            if sent >= measure_from:
                latencies.append(done - sent)
            doc += concurrency

    async def start_counting() -> None:
        await asyncio.sleep(warmup_s)
        counted.update(
            executions=counter.executions, rows=counter.rows, compute_s=counter.compute_s
        )

    await asyncio.gather(start_counting(), *(client(n) for n in range(concurrency)))
    elapsed = time.perf_counter() - measure_from
    await batcher.close()
    executions = counter.executions - counted["executions"]
    rows = counter.rows - counted["rows"]
    compute = counter.compute_s - counted["compute_s"]
    level = {
        "config": "batched" if batched else "unbatched",
        "concurrency": concurrency,
        "requests": len(latencies),
        "throughput_rps": len(latencies) / elapsed,
        "avg_batch": rows / executions if executions else 0.0,
        "compute_ms_per_batch": compute / executions * 1e3 if executions else 0.0,
    } | latency_ms(latencies)
    return level, answers


def measure(args: StepArgs, record: StepRecord) -> str:
    problem = project_apis.batcher_import_problem()
    if problem:
        return f"skipped: {problem}"
    device = pick_device(args.dry_run)
    sizes = DRY if args.dry_run else FULL
    record.set(device=str(device), sizes=asdict(sizes), sequence=SEQUENCE)
    vocab = sizes.model.vocab_size
    docs = minilm.make_documents(sizes.documents, vocab, SEQUENCE, SEQUENCE, seed=3)
    model = Model(docs, sizes.model, device)
    # What batching can buy at most: the model's own time at batch 1 and 8 (no batcher).
    timings = time_on_device(
        {f"batch_{b}": lambda b=b: model.run(list(range(b))) for b in (1, 8)},
        device,
        warmup=2,
        rounds=sizes.model_time_rounds,
    )
    compute = {f"{name}_p50_ms": timings.median(name) * 1e3 for name in timings.samples}
    compute["batch_8_cost_vs_batch_1"] = timings.ratio("batch_1", "batch_8")  # time 8 / time 1
    record.set(model_time=compute)
    expected = model.fingerprints(docs.input_ids.to(device)).cpu().numpy()
    record.set(distinct_fingerprints=len(set(expected.tolist())) == len(docs))
    alone = {i: model.run([i])[1][0] for i in range(len(docs))}
    worst, misrouted = 0.0, 0
    by_level: dict[tuple[str, int], dict] = {}
    for concurrency in CONCURRENCY:
        order = CONFIGS if concurrency % 2 else tuple(reversed(CONFIGS))
        for config in order:
            needed = sizes.seconds_per_level + sizes.warmup_s + 1.0
            if not args.dry_run and not record.budget.allows(needed):
                reason = f"step budget: {record.budget.left():.0f} s left"
                record.add_row({"config": config, "concurrency": concurrency} | {"skipped": reason})
                continue
            level, answers = asyncio.run(
                closed_loop(
                    model, config == "batched", concurrency, sizes.seconds_per_level, sizes.warmup_s
                )
            )
            misrouted += sum(int(fp != expected[i]) for i, (fp, _) in answers)
            worst = max([worst] + [float(np.max(np.abs(a - alone[i]))) for i, (_, a) in answers])
            by_level[(config, concurrency)] = level
            record.add_row(level)
            print(
                f"{config:9s} c={concurrency:2d}: {level['throughput_rps']:8.1f} req/s  "
                f"p50 {level['p50_ms']:.2f} ms  p99 {level['p99_ms']:.2f} ms  "
                f"batch {level['avg_batch']:.1f}",
                flush=True,
            )
    ratios = {
        str(c): by_level[("batched", c)]["throughput_rps"]
        / by_level[("unbatched", c)]["throughput_rps"]
        for c in CONCURRENCY
        if ("batched", c) in by_level and ("unbatched", c) in by_level
    }
    record.set(throughput_ratio_batched_vs_unbatched=ratios)
    record.add_check("answers_from_another_requests_row", misrouted, 0, "<=")
    record.add_check(
        "answers_match_the_document_run_alone_max_abs_logit_diff",
        worst,
        GATES.fp16_max_abs_logit_diff,
        "<=",
    )
    return "ok"


def main(argv: list[str] | None = None) -> int:
    args = parse_args("python -m gpu_check.batching", __doc__.splitlines()[0], argv)
    return run_step("batching", args, lambda record: measure(args, record))


if __name__ == "__main__":
    sys.exit(main())
