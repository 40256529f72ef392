"""Correctness gates: every variant passes them before it is promoted into the repository.

The thresholds live in ONE place, :data:`GATES` (a frozen dataclass). A gate is a
:class:`GateCheck` (a measure of :data:`MEASURES`, a limit, a comparison); the checks a
variant must pass come from its row of the recipe table (``quantize.RECIPES``), usually one
of the profiles :data:`FP32_GATES`, :data:`FP16_GATES`, :data:`INT8_GATES`. Each check yields
a :class:`GateResult` (name, measured value, limit, passed), the one gate-result type of the
package (the GPT's gates use it too); a variant with any failing gate is not promoted, and
the build prints the gate and the value.

Held-out data (:class:`GateSet`): BBC dev articles never seen in training, plus a "length
ladder" of dev texts cut to 4..256 tokens. All texts run in padded, mixed-length batches;
the ladder also runs alone (batch 1), and the two outputs of each text are compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from inference_pipeline.runtime import Outputs, Runner, run_texts
from inference_pipeline.tokenization import TextTokenizer


@dataclass(frozen=True)
class GateThresholds:
    """Every gate's limit. FP32 = a variant that claims FP32 numerics; reduced = INT8/FP16."""

    fp32_max_abs_logit_diff: float = 1e-4  # vs PyTorch, same padded batches
    fp32_alone_vs_batch_max_abs_diff: float = 1e-4  # logits and embeddings
    reduced_min_embedding_cosine: float = 0.98  # vs PyTorch FP32, worst text
    reduced_min_argmax_agreement: float = 0.99  # vs PyTorch FP32, fraction of texts
    reduced_max_accuracy_drop_points: float = 0.5  # held-out accuracy, percentage points
    # A text alone vs padded in a batch, for INT8/FP16: dynamic INT8 measures activation
    # scales per batch, so the figure cannot be 1e-4; the embedding must still agree.
    reduced_alone_vs_batch_min_cosine: float = 0.98
    fp16_max_abs_logit_diff: float = 1e-2  # FP16 keeps ~3 significant digits
    max_non_finite_values: int = 0


GATES = GateThresholds()
LENGTH_LADDER = (4, 8, 16, 32, 64, 96, 128, 192, 256)  # token counts of the ladder texts


@dataclass
class GateResult:
    name: str
    value: float
    limit: float
    comparison: str  # "<=" or ">="
    passed: bool
    detail: str = ""  # what the value is made of, or where it failed

    @classmethod
    def compare(
        cls, name: str, value: float, limit: float, comparison: str, detail: str = ""
    ) -> GateResult:
        """``value`` against ``limit``; a non-finite value never passes."""
        ok = value <= limit if comparison == "<=" else value >= limit
        passed = bool(ok and np.isfinite(value))
        return cls(name, float(value), float(limit), comparison, passed, detail)

    def describe(self) -> str:
        return f"{self.name} = {self.value:.4g} (limit {self.comparison} {self.limit:g})"


@dataclass(frozen=True)
class GateCheck:
    """One gate: ``measure`` (a key of :data:`MEASURES`) compared with ``limit``."""

    measure: str
    limit: float
    comparison: str  # "<=" or ">="


@dataclass
class GateSet:
    """Held-out texts: ``texts[i]`` has label ``labels[i]``; ``alone`` indexes the texts that
    also run alone; ``batch_size`` is the padded batch size of the batched pass."""

    texts: list[str]
    labels: list[int]
    alone: list[int]
    batch_size: int = 8

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> GateSet:
        data = json.loads(path.read_text())
        return cls(data["texts"], data["labels"], data["alone"], data["batch_size"])


def build_gate_set(
    tokenizer: TextTokenizer, dev_per_label: int = 40, ladder_per_length: int = 2, seed: int = 0
) -> GateSet:
    """Dev articles (``dev_per_label`` per topic, truncated at 256 tokens by the tokenizer)
    in a shuffled order, so every batch mixes lengths, then the length ladder."""
    from phase01_common.bbc_news import load_bbc_news

    data = load_bbc_news(seed=seed)
    dev = data.take(0, dev_per_label)
    texts, labels = list(dev.dev_texts), [int(y) for y in dev.dev_labels]
    # The ladder comes from dev articles after the ones used above (still never trained on).
    spare = data.dev_texts[len(data.dev_texts) // 2 :]
    spare_labels = data.dev_labels[len(data.dev_texts) // 2 :]
    alone = []
    for i, tokens in enumerate(
        length for length in LENGTH_LADDER for _ in range(ladder_per_length)
    ):
        alone.append(len(texts))
        texts.append(tokenizer.truncate_to_tokens(spare[i], tokens))
        labels.append(int(spare_labels[i]))
    # Shuffle so that padded batches mix short ladder texts with long articles.
    order = np.random.default_rng(seed).permutation(len(texts))
    position = {int(old): new for new, old in enumerate(order)}
    return GateSet(
        texts=[texts[i] for i in order],
        labels=[labels[i] for i in order],
        alone=sorted(position[i] for i in alone),
    )


@dataclass
class Evaluation:
    """One model's outputs on a gate set: batched (all texts) and alone (``alone`` texts)."""

    batched: Outputs
    alone: Outputs
    seconds: float = 0.0

    def accuracy(self, labels: list[int]) -> float:
        return float(np.mean(self.batched[0].argmax(axis=1) == np.asarray(labels)))

    def save(self, path: Path) -> None:
        np.savez(
            path,
            logits=self.batched[0],
            embedding=self.batched[1],
            alone_logits=self.alone[0],
            alone_embedding=self.alone[1],
        )

    @classmethod
    def load(cls, path: Path) -> Evaluation:
        with np.load(path) as data:
            batched = (data["logits"], data["embedding"])
            return cls(batched, (data["alone_logits"], data["alone_embedding"]))


def evaluate(runner: Runner, tokenizer: TextTokenizer, gate_set: GateSet) -> Evaluation:
    import time

    start = time.perf_counter()
    batched = run_texts(runner, tokenizer, gate_set.texts, gate_set.batch_size)
    alone = run_texts(runner, tokenizer, [gate_set.texts[i] for i in gate_set.alone], 1)
    return Evaluation(batched, alone, time.perf_counter() - start)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest row-wise cosine similarity of two [N, D] arrays."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.min(np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)))


@dataclass
class GateInputs:
    """What a measure reads: the candidate's and the reference's outputs on one gate set."""

    candidate: Evaluation
    reference: Evaluation
    gate_set: GateSet

    @property
    def alone_index(self) -> np.ndarray:
        return np.asarray(self.gate_set.alone)


def _non_finite(g: GateInputs) -> float:
    arrays = (*g.candidate.batched, *g.candidate.alone)
    return float(sum(np.size(a) - np.count_nonzero(np.isfinite(a)) for a in arrays))


def _logit_diff(g: GateInputs) -> float:
    return float(np.max(np.abs(g.candidate.batched[0] - g.reference.batched[0])))


def _alone_diff(g: GateInputs) -> float:
    c = g.candidate
    return max(float(np.max(np.abs(c.alone[k] - c.batched[k][g.alone_index]))) for k in (0, 1))


def _embedding_cosine(g: GateInputs) -> float:
    return min_cosine(g.candidate.batched[1], g.reference.batched[1])


def _argmax_agreement(g: GateInputs) -> float:
    ours, theirs = g.candidate.batched[0].argmax(axis=1), g.reference.batched[0].argmax(axis=1)
    return float(np.mean(ours == theirs))


def _accuracy_drop(g: GateInputs) -> float:
    labels = g.gate_set.labels
    return 100.0 * (g.reference.accuracy(labels) - g.candidate.accuracy(labels))


def _alone_cosine(g: GateInputs) -> float:
    return min_cosine(g.candidate.alone[1], g.candidate.batched[1][g.alone_index])


# Every measure a gate can compare with a limit, by the name results carry.
MEASURES: dict[str, Callable[[GateInputs], float]] = {
    "non_finite_values": _non_finite,
    "max_abs_logit_diff_vs_torch": _logit_diff,  # vs PyTorch, same padded batches
    "alone_vs_batch_max_abs_diff": _alone_diff,  # logits and embeddings
    "min_embedding_cosine_vs_fp32": _embedding_cosine,
    "argmax_agreement_vs_fp32": _argmax_agreement,
    "accuracy_drop_points": _accuracy_drop,
    "alone_vs_batch_min_cosine": _alone_cosine,
}

_FINITE = GateCheck("non_finite_values", GATES.max_non_finite_values, "<=")
# A variant that claims FP32 numerics.
FP32_GATES = (
    _FINITE,
    GateCheck("max_abs_logit_diff_vs_torch", GATES.fp32_max_abs_logit_diff, "<="),
    GateCheck("alone_vs_batch_max_abs_diff", GATES.fp32_alone_vs_batch_max_abs_diff, "<="),
)
# Reduced precision: agreement with the FP32 reference instead of equality.
REDUCED_GATES = (
    GateCheck("min_embedding_cosine_vs_fp32", GATES.reduced_min_embedding_cosine, ">="),
    GateCheck("argmax_agreement_vs_fp32", GATES.reduced_min_argmax_agreement, ">="),
    GateCheck("accuracy_drop_points", GATES.reduced_max_accuracy_drop_points, "<="),
    GateCheck("alone_vs_batch_min_cosine", GATES.reduced_alone_vs_batch_min_cosine, ">="),
)
INT8_GATES = (_FINITE, *REDUCED_GATES)
FP16_GATES = (
    _FINITE,
    GateCheck("max_abs_logit_diff_vs_torch", GATES.fp16_max_abs_logit_diff, "<="),
    *REDUCED_GATES,
)


@dataclass
class GateReport:
    variant: str
    results: list[GateResult] = field(default_factory=list)
    accuracy: float = float("nan")

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def failed(self) -> list[GateResult]:
        return [r for r in self.results if not r.passed]


def apply_gates(
    variant: str,
    checks: tuple[GateCheck, ...],
    candidate: Evaluation,
    reference: Evaluation,
    gate_set: GateSet,
) -> GateReport:
    """Compare a variant's outputs with the PyTorch FP32 reference on the same gate set,
    one result per check, in the checks' order."""
    unknown = [c.measure for c in checks if c.measure not in MEASURES]
    if unknown or not checks:
        raise ValueError(f"unknown gate measure(s) {unknown}; known: {sorted(MEASURES)}")
    inputs = GateInputs(candidate, reference, gate_set)
    results = [
        GateResult.compare(c.measure, MEASURES[c.measure](inputs), c.limit, c.comparison)
        for c in checks
    ]
    return GateReport(variant, results, accuracy=candidate.accuracy(gate_set.labels))
