"""Correctness gates: every variant passes them before it is promoted into the repository.

The thresholds live in ONE place, :data:`GATES` (a frozen dataclass). Each gate yields a
:class:`GateResult` (name, measured value, limit, passed); a variant with any failing gate is
not promoted, and the build prints the gate and the value.

Held-out data (:class:`GateSet`): BBC dev articles never seen in training, plus a "length
ladder" of dev texts cut to 4..256 tokens. All texts run in padded, mixed-length batches;
the ladder also runs alone (batch 1), and the two outputs of each text are compared.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from inference_pipeline.runtime import Outputs, Runner, run_texts
from inference_pipeline.tokenization import MAX_SEQUENCE_LENGTH, TextTokenizer


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

    def describe(self) -> str:
        return f"{self.name} = {self.value:.4g} (limit {self.comparison} {self.limit:g})"


def _gate(name: str, value: float, limit: float, comparison: str) -> GateResult:
    ok = value <= limit if comparison == "<=" else value >= limit
    return GateResult(name, float(value), float(limit), comparison, bool(ok and np.isfinite(value)))


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


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.min(np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)))


def _non_finite(evaluation: Evaluation) -> int:
    arrays = (*evaluation.batched, *evaluation.alone)
    return int(sum(np.size(a) - np.count_nonzero(np.isfinite(a)) for a in arrays))


@dataclass
class GateReport:
    variant: str
    precision: str
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
    precision: str,
    candidate: Evaluation,
    reference: Evaluation,
    gate_set: GateSet,
    thresholds: GateThresholds = GATES,
) -> GateReport:
    """Compare a variant's outputs with the PyTorch FP32 reference on the same gate set."""
    if precision not in ("fp32", "fp16", "int8"):
        raise ValueError(f"unknown precision {precision!r}")
    t = thresholds
    report = GateReport(variant, precision, accuracy=candidate.accuracy(gate_set.labels))
    results = [_gate("non_finite_values", _non_finite(candidate), t.max_non_finite_values, "<=")]
    (logits, embedding), (ref_logits, ref_embedding) = candidate.batched, reference.batched
    alone_index = np.asarray(gate_set.alone)
    logit_diff = float(np.max(np.abs(logits - ref_logits)))
    alone_diff = max(
        float(np.max(np.abs(candidate.alone[k] - candidate.batched[k][alone_index])))
        for k in (0, 1)
    )
    if precision == "fp32":
        results.append(
            _gate("max_abs_logit_diff_vs_torch", logit_diff, t.fp32_max_abs_logit_diff, "<=")
        )
        results.append(
            _gate(
                "alone_vs_batch_max_abs_diff", alone_diff, t.fp32_alone_vs_batch_max_abs_diff, "<="
            )
        )
    else:
        if precision == "fp16":
            results.append(
                _gate("max_abs_logit_diff_vs_torch", logit_diff, t.fp16_max_abs_logit_diff, "<=")
            )
        cosine = _min_cosine(embedding, ref_embedding)
        agreement = float(np.mean(logits.argmax(axis=1) == ref_logits.argmax(axis=1)))
        drop = 100.0 * (reference.accuracy(gate_set.labels) - report.accuracy)
        alone_cosine = _min_cosine(candidate.alone[1], candidate.batched[1][alone_index])
        results += [
            _gate("min_embedding_cosine_vs_fp32", cosine, t.reduced_min_embedding_cosine, ">="),
            _gate("argmax_agreement_vs_fp32", agreement, t.reduced_min_argmax_agreement, ">="),
            _gate("accuracy_drop_points", drop, t.reduced_max_accuracy_drop_points, "<="),
            _gate(
                "alone_vs_batch_min_cosine",
                alone_cosine,
                t.reduced_alone_vs_batch_min_cosine,
                ">=",
            ),
        ]
    report.results = results
    return report


def gate_runner(
    runner: Runner,
    variant: str,
    precision: str,
    tokenizer: TextTokenizer,
    gate_set: GateSet,
    reference: Evaluation,
    thresholds: GateThresholds = GATES,
) -> GateReport:
    """Evaluate ``runner`` on ``gate_set`` and apply the gates (convenience for callers)."""
    return apply_gates(
        variant, precision, evaluate(runner, tokenizer, gate_set), reference, gate_set, thresholds
    )


def text_lengths(tokenizer: TextTokenizer, gate_set: GateSet) -> tuple[int, int]:
    """Shortest and longest text of the gate set in tokens (after truncation)."""
    counts = [tokenizer.token_count(text) for text in gate_set.texts]
    return min(counts), min(max(counts), MAX_SEQUENCE_LENGTH)
