from collections import Counter

import numpy as np
import pytest
from phase01_common.bbc_news import EXPECTED_ARTICLES, duplicate_groups, load_bbc_news
from phase01_common.checkpoints import minilm_checkpoint_dir


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
    # Independent of the loader's rule (5-word shingles, 0.8 of the smaller article): here
    # 8-word shingles, and a dev article may share at most half of them with any train article.
    def shingles(text):
        words = text.lower().split()
        return {" ".join(words[i : i + 8]) for i in range(max(1, len(words) - 7))}

    for seed in (0, 1, 3):
        split = load_bbc_news(seed=seed)
        index = {}
        for t, text in enumerate(split.train_texts):
            for shingle in shingles(text):
                index.setdefault(shingle, set()).add(t)
        for text in split.dev_texts:
            own = shingles(text)
            hits = Counter(t for shingle in own for t in index.get(shingle, ()))
            worst = max(hits.values(), default=0) / len(own)
            assert worst <= 0.5, (seed, text[:80], worst)


def test_duplicate_groups_finds_copies_and_near_copies():
    story = " ".join(f"word{i}" for i in range(100))
    edited = story.replace("word50", "changed")  # one word of 100: a near copy
    texts = [story, "something else entirely here", story.upper(), edited, "  " + story + "\n"]
    groups = sorted(sorted(g) for g in duplicate_groups(texts))
    assert groups == [[0, 2, 3, 4], [1]]


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
