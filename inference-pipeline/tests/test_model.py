"""The model: fine-tuned with fundamentals.finetune, cached by settings, exported as
(input_ids, attention_mask) -> (logits, embedding)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from inference_pipeline.model import (
    PIPELINE_TRAINING,
    FineTuneConfig,
    TopicClassifier,
    load_or_train,
)
from inference_pipeline.tokenization import MAX_SEQUENCE_LENGTH, TextTokenizer
from inference_pipeline_harness.scenarios import quick_artifacts


@pytest.fixture(scope="session")
def art():
    return quick_artifacts()


def test_settings_key_changes_with_every_setting():
    base = PIPELINE_TRAINING
    assert base.key() == FineTuneConfig(**dataclasses.asdict(base)).key()
    for field in dataclasses.fields(FineTuneConfig):
        value = getattr(base, field.name)
        changed = dataclasses.replace(base, **{field.name: value * 2 if value else 1})
        assert changed.key() != base.key(), field.name


def test_cached_checkpoint_loads_the_trained_weights(art, tmp_path):
    again = load_or_train(PIPELINE_TRAINING, progress=lambda _: None)
    assert again.from_cache
    for (name, a), (_, b) in zip(
        art.trained.sequence_classifier.state_dict().items(),
        again.sequence_classifier.state_dict().items(),
        strict=True,
    ):
        assert torch.equal(a, b), name
    assert art.trained.label_names == ("business", "entertainment", "politics", "sports", "tech")


def test_head_was_trained_by_the_finetune_code(art):
    # Phase one moved the head away from the seeded fresh head fundamentals.finetune makes.
    from fundamentals.finetune import load_minilm_classifier

    fresh, _ = load_minilm_classifier(5, seed=PIPELINE_TRAINING.seed)
    trained = art.trained.sequence_classifier
    assert not torch.equal(fresh.classifier.weight, trained.classifier.weight)
    # phase two fine-tuned the base too (layer-wise learning rates: the top layer most)
    top = len(trained.bert.encoder.layer) - 1
    fresh_top = fresh.bert.encoder.layer[top].output.dense.weight
    assert not torch.equal(fresh_top, trained.bert.encoder.layer[top].output.dense.weight)


def test_classifier_outputs_and_masked_mean_embedding(art):
    classifier: TopicClassifier = art.trained.classifier("sdpa")
    batch = art.tokenizer.encode(["short text", "a somewhat longer text about the stock market"])
    ids, mask = (torch.from_numpy(batch[k]) for k in ("input_ids", "attention_mask"))
    with torch.inference_mode():
        logits, embedding = classifier(ids, mask)
        hidden = classifier.bert(input_ids=ids[:1], attention_mask=mask[:1]).last_hidden_state
    assert logits.shape == (2, 5) and embedding.shape == (2, 384)
    length = int(mask[0].sum())
    torch.testing.assert_close(embedding[0], hidden[0, :length].mean(0), atol=1e-5, rtol=1e-5)


def test_sdpa_and_eager_attention_agree(art):
    batch = art.tokenizer.encode(["one", "two words and many more words after them"])
    ids, mask = (torch.from_numpy(batch[k]) for k in ("input_ids", "attention_mask"))
    with torch.inference_mode():
        a = art.trained.classifier("sdpa")(ids, mask)
        b = art.trained.classifier("eager")(ids, mask)
    assert max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True)) <= 1e-4


def test_tokenizer_pads_to_longest_and_truncates_at_256():
    tokenizer = TextTokenizer.from_checkpoint()
    batch = tokenizer.encode(["hi", "word " * 1000])
    assert batch["input_ids"].shape == (2, MAX_SEQUENCE_LENGTH)
    assert batch["input_ids"].dtype == np.int64
    assert batch["attention_mask"][0].sum() == 3  # [CLS] hi [SEP]
    assert tokenizer.token_count(tokenizer.truncate_to_tokens("word " * 500, 17)) == 17
    with pytest.raises(ValueError, match="non-empty list"):
        tokenizer.encode("not a list")
