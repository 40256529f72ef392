"""GLUE MNLI in its TSV format (``dev_matched.tsv`` / ``dev_mismatched.tsv`` / ``train.tsv``).

The spec evaluates on the MNLI dev set, which cannot be fetched on this machine; the demo uses
BBC News instead. Users who have the GLUE files can load them here and feed the sentence pairs
to the same tokenizer and classifier (``num_labels=3``).

Format: tab-separated, a header row naming the columns; the premise is ``sentence1``, the
hypothesis ``sentence2``, the gold label ``gold_label`` (the last column). Quotes are literal
(GLUE files are not CSV-quoted), so the file is split on tabs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MNLI_LABELS: tuple[str, ...] = ("contradiction", "entailment", "neutral")
_REQUIRED_COLUMNS = ("sentence1", "sentence2", "gold_label")


@dataclass(frozen=True)
class MnliExamples:
    premises: list[str]
    hypotheses: list[str]
    labels: np.ndarray  # int64 indexes into label_names
    label_names: tuple[str, ...] = MNLI_LABELS

    def __len__(self) -> int:
        return len(self.labels)


def load_mnli_tsv(path: str | Path, skip_unlabeled: bool = True) -> MnliExamples:
    """Read a GLUE MNLI TSV file into sentence pairs and integer labels.

    Rows whose gold label is ``-`` (no annotator majority; a handful exist in GLUE's files) are
    skipped when ``skip_unlabeled``; any other unknown label, a missing column or a short row
    raises ``ValueError`` naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"MNLI file not found: {path}")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise ValueError(f"{path} is empty (expected a header row)")
    header = lines[0].split("\t")
    missing = [c for c in _REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{path}: header lacks column(s) {missing}; is this a GLUE MNLI TSV?")
    i_premise, i_hypothesis = header.index("sentence1"), header.index("sentence2")
    # The label is the last column named gold_label (test files have none).
    i_label = len(header) - 1 - header[::-1].index("gold_label")
    label_index = {name: i for i, name in enumerate(MNLI_LABELS)}

    premises: list[str] = []
    hypotheses: list[str] = []
    labels: list[int] = []
    for line_no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        row = line.split("\t")
        if len(row) <= max(i_premise, i_hypothesis, i_label):
            raise ValueError(f"{path}:{line_no}: {len(row)} columns, header has {len(header)}")
        label = row[i_label].strip()
        if label == "-" and skip_unlabeled:
            continue
        if label not in label_index:
            raise ValueError(f"{path}:{line_no}: unknown label {label!r}, expected {MNLI_LABELS}")
        premises.append(row[i_premise])
        hypotheses.append(row[i_hypothesis])
        labels.append(label_index[label])
    return MnliExamples(premises, hypotheses, np.array(labels, dtype=np.int64))
