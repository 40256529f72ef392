import numpy as np
import pytest
from phase01_common.bbc_news import EXPECTED_ARTICLES, load_bbc_news
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


def test_bbc_news_take_is_stratified():
    small = load_bbc_news().take(train_per_label=3, dev_per_label=2)
    assert np.bincount(small.train_labels).tolist() == [3] * 5
    assert np.bincount(small.dev_labels).tolist() == [2] * 5


def test_bbc_news_rejects_bad_fraction():
    with pytest.raises(ValueError, match="dev_fraction"):
        load_bbc_news(dev_fraction=1.5)


def test_minilm_checkpoint_folder():
    import json

    folder = minilm_checkpoint_dir()
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == 6 and config["hidden_size"] == 384
