import itertools
from collections import Counter

import numpy as np
import pytest
from phase01_common.bbc_news import (
    EXPECTED_ARTICLES,
    MAX_SHINGLE_ARTICLES,
    NEAR_DUPLICATE_OVERLAP,
    SHINGLE_WORDS,
    bbc_news_dir,
    duplicate_groups,
    load_bbc_news,
)
from phase01_common.checkpoints import minilm_checkpoint_dir
from scipy import sparse


def test_bbc_news_split_is_complete_stratified_and_deterministic():
    split = load_bbc_news(dev_fraction=0.2, seed=0)
    assert split.label_names == ("business", "entertainment", "politics", "sports", "tech")
    assert len(split.train_texts) + len(split.dev_texts) == EXPECTED_ARTICLES
    assert not set(split.train_texts) & set(split.dev_texts)  # duplicates stay on one side
    for k in range(split.num_labels):
        total = (split.train_labels == k).sum() + (split.dev_labels == k).sum()
        assert abs((split.dev_labels == k).sum() / total - 0.2) < 0.01
    again = load_bbc_news(dev_fraction=0.2, seed=0)
    assert again.dev_texts == split.dev_texts
    np.testing.assert_array_equal(again.train_labels, split.train_labels)
    other = load_bbc_news(dev_fraction=0.2, seed=1)
    assert other.dev_texts != split.dev_texts
    assert all(t for t in split.train_texts)


def test_bbc_news_dev_has_no_near_copy_in_train():
    # Independent of the loader's rule (5-word shingles, half of the smaller article, stock
    # phrases ignored, within a topic): here every 8-word shingle counts, across topics, and a
    # dev article may share at most half of its shingles with any train article. Shared counts
    # are a sparse (dev x shingle) by (shingle x train) product.
    vocabulary = {}

    def shingle_ids(text):
        words = text.lower().split()
        own = {" ".join(words[i : i + 8]) for i in range(max(1, len(words) - 7))}
        return np.array(sorted(vocabulary.setdefault(s, len(vocabulary)) for s in own))

    ids = {}

    def incidence(texts):
        rows = [ids[t] if t in ids else ids.setdefault(t, shingle_ids(t)) for t in texts]
        indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
        data = np.ones(indptr[-1], dtype=np.int32)
        return rows, (data, np.concatenate(rows), indptr)

    for seed in (0, 1, 3):
        split = load_bbc_news(seed=seed)
        dev_rows, dev_parts = incidence(split.dev_texts)
        _, train_parts = incidence(split.train_texts)
        width = len(vocabulary)
        dev = sparse.csr_matrix(dev_parts, shape=(len(dev_rows), width))
        train = sparse.csr_matrix(train_parts, shape=(len(split.train_texts), width))
        shared = (dev @ train.T).max(axis=1).toarray().ravel()
        worst = shared / np.array([len(r) for r in dev_rows])
        assert len(worst) == len(split.dev_texts)
        for i in np.flatnonzero(worst > 0.5):
            pytest.fail(f"seed {seed}: {split.dev_texts[i][:80]!r} shares {worst[i]:.2f}")


def _reference_duplicate_groups(texts):
    # The rule written the plain way (string shingles, a posting list per shingle, a pair
    # counter), for the vectorized duplicate_groups to equal.
    parent = list(range(len(texts)))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    words = [t.lower().split() for t in texts]
    first = {}
    for i, w in enumerate(words):
        parent[find(i)] = find(first.setdefault(" ".join(w), i))
    shingles = [
        {" ".join(w[j : j + SHINGLE_WORDS]) for j in range(max(1, len(w) - SHINGLE_WORDS + 1))}
        for w in words
    ]
    postings = {}
    for i, own in enumerate(shingles):
        for s in own:
            postings.setdefault(s, []).append(i)
    shared = Counter()
    for holders in postings.values():
        if 1 < len(holders) <= MAX_SHINGLE_ARTICLES:
            shared.update(itertools.combinations(holders, 2))
    for (a, b), count in shared.items():
        if count >= NEAR_DUPLICATE_OVERLAP * min(len(shingles[a]), len(shingles[b])):
            parent[find(a)] = find(b)
    groups = {}
    for i in range(len(texts)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def read_text(path):
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return raw.decode("latin-1").strip()


def test_duplicate_groups_equals_the_plain_rule_on_every_topic():
    root = bbc_news_dir()
    topics = sorted(p for p in root.iterdir() if p.is_dir())
    assert len(topics) == 5
    for topic in topics:
        texts = [read_text(path) for path in sorted(topic.glob("*.txt"))]
        groups = duplicate_groups(texts)
        assert groups == _reference_duplicate_groups(texts), topic.name
        assert any(len(g) > 1 for g in groups), topic.name


def test_duplicate_groups_equals_the_plain_rule_on_edge_cases():
    stock = " ".join(f"stock{i}" for i in range(SHINGLE_WORDS))
    cases = [
        [],
        [""],
        ["", "  \n", "a"],
        ["a b", "A  b", "a b c", "b a"],  # shorter than a shingle: one shingle of all words
        ["a b c d e", "a b c d e f", "a b c d e f g h i j"],
        # a phrase every article holds is no evidence: MAX_SHINGLE_ARTICLES + 1 short articles
        # that share only it stay apart, one fewer of them (each then shares it) group together
        [f"{stock} tail{i}" for i in range(MAX_SHINGLE_ARTICLES + 1)],
        [f"{stock} tail{i}" for i in range(MAX_SHINGLE_ARTICLES)],
    ]
    for texts in cases:
        assert duplicate_groups(texts) == _reference_duplicate_groups(texts), texts
    assert len(duplicate_groups(cases[-2])) == MAX_SHINGLE_ARTICLES + 1
    assert duplicate_groups(cases[-1]) == [list(range(MAX_SHINGLE_ARTICLES))]


def test_bbc_news_take_is_stratified():
    small = load_bbc_news().take(train_per_label=3, dev_per_label=2)
    assert np.bincount(small.train_labels).tolist() == [3] * 5
    assert np.bincount(small.dev_labels).tolist() == [2] * 5
    with pytest.raises(ValueError, match="train_per_label must be >= 0"):
        load_bbc_news().take(-1, 2)
    with pytest.raises(ValueError, match="dev_per_label=1000, but the dev part holds only"):
        load_bbc_news().take(3, 1000)


@pytest.mark.parametrize("fraction", [1.5, 0.0, 1.0, -0.1, float("nan"), float("inf")])
def test_bbc_news_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="dev_fraction must be in"):
        load_bbc_news(dev_fraction=fraction)


@pytest.mark.parametrize(("fraction", "part"), [(1e-4, "dev"), (0.9999, "train")])
def test_bbc_news_refuses_a_fraction_that_empties_a_part(fraction, part):
    with pytest.raises(ValueError, match=f"with no {part} article"):
        load_bbc_news(dev_fraction=fraction)


def test_minilm_checkpoint_folder():
    import json

    folder = minilm_checkpoint_dir()
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == 6 and config["hidden_size"] == 384
