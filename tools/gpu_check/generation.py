"""Step 4: the GPT's continuous-batching engine with a CUDA step (torch, FP16), against static
batching at concurrency 16: tokens/s, time to first token and inter-token latency.

``python -m gpu_check.generation --out FILE --budget-s N [--dry-run]``

The engines are the pipeline's (``inference_pipeline.generation``), unchanged: they keep the
paged KV cache in host memory and call a step function with NumPy arrays. :class:`DeviceStep`
is that step function on the GPU: the arrays go to the device, the GPT (the pipeline's
default config, randomly initialised: the output lengths are fixed by ``max_new_tokens``, so
timings do not depend on the weights) runs with FP16 weights under autocast (the attention
bias and softmax stay FP32), and logits and the new tokens' keys/values (the graph returns only
those; the engine appends them to its cache) come back as FP32. So the figures include copying
the kept past to the device on every step and the new keys/values back, which is what this
engine design costs on a GPU. The workload and the closed loop are the generation
benchmark's (the same long-tailed output lengths), both engines timed in alternating rounds.

One check: the FP16 device step's logits against the FP32 CPU step (``TorchStep``), on one
prefill pass and one decode pass over that prefill's cache, within the FP16 gate's 1e-2.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from inference_pipeline.gates import GATES

from gpu_check import project_apis
from gpu_check.common import StepArgs, StepRecord, parse_args, pick_device, run_step

# Prompts are cut from this file's bytes (the workload needs text; the BBC data set is not on
# the lent machine).
PROMPT_SOURCE = Path(__file__).resolve().parents[2] / "README.md"


@dataclass(frozen=True)
class Sizes:
    config: project_apis.GPTConfig
    concurrency: int
    requests_per_client: int
    rounds: int


FULL = Sizes(project_apis.GPTConfig(), 16, 4, 2)
DRY = Sizes(project_apis.TINY_CONFIG, 4, 1, 1)


class DeviceStep:
    """The engines' step function (``StepFunction``) on ``device`` in FP16."""

    def __init__(self, model: project_apis.GPT, device: torch.device) -> None:
        self.model = model.to(device).half().eval()
        self.config = model.config
        self.device = device

    def _tensor(self, array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device, dtype)

    @torch.inference_mode()
    def __call__(self, tokens, positions, attention_mask, past):
        with torch.autocast(self.device.type, dtype=torch.float16):
            outputs = self.model(
                self._tensor(tokens, torch.int64),
                self._tensor(positions, torch.int64),
                self._tensor(attention_mask, torch.int64),
                *(self._tensor(p, torch.float16) for p in past),
            )
        host = [t.float().cpu().numpy() for t in outputs]
        return host[0], host[1:]


def step_difference(step: DeviceStep, reference: project_apis.TorchStep, seed: int = 0) -> float:
    """Max |logit difference| of ``step`` against ``reference`` on a 3-row prefill of 16 bytes
    and a decode pass over its cache (each from its own cache)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 256, size=(3, 16), dtype=np.int64)
    positions = np.tile(np.arange(16, dtype=np.int64), (3, 1))
    mask = np.ones((3, 16), dtype=np.int64)
    past = project_apis.empty_past(step.config, 3)
    diffs = []
    caches = {}
    for name, fn in (("device", step), ("reference", reference)):
        logits, new = fn(tokens, positions, mask, past)  # after an empty past: the whole cache
        caches[name] = (logits, new)
    diffs.append(np.max(np.abs(caches["device"][0] - caches["reference"][0])))
    nxt = caches["reference"][0][:, -1].argmax(axis=1)[:, None].astype(np.int64)
    decode_mask = np.ones((3, 17), dtype=np.int64)
    last = np.full((3, 1), 16, dtype=np.int64)
    device_logits, _ = step(nxt, last, decode_mask, caches["device"][1])
    reference_logits, _ = reference(nxt, last, decode_mask, caches["reference"][1])
    diffs.append(np.max(np.abs(device_logits - reference_logits)))
    return float(max(diffs))


def measure(args: StepArgs, record: StepRecord) -> str:
    device = pick_device(args.dry_run)
    sizes = DRY if args.dry_run else FULL
    record.set(device=str(device), sizes=asdict(sizes))
    torch.manual_seed(0)
    model = project_apis.GPT(sizes.config)
    reference = project_apis.TorchStep(project_apis.GPT(sizes.config))
    reference.model.load_state_dict(model.state_dict())
    step = DeviceStep(model, device)
    record.add_check(
        "fp16_device_step_vs_fp32_cpu_max_abs_logit_diff",
        step_difference(step, reference),
        GATES.fp16_max_abs_logit_diff,
        "<=",
    )
    text = np.frombuffer(PROMPT_SOURCE.read_bytes(), dtype=np.uint8)
    results, verdict = project_apis.engine_comparison(
        step, text, sizes.concurrency, sizes.requests_per_client, sizes.rounds
    )
    for result in results:
        record.add_row(asdict(result))
    record.set(verdict=verdict)
    return "ok"


def main(argv: list[str] | None = None) -> int:
    args = parse_args("python -m gpu_check.generation", __doc__.splitlines()[0], argv)
    return run_step("generation", args, lambda record: measure(args, record))


if __name__ == "__main__":
    sys.exit(main())
