"""The Keras BERT against transformers, the checkpoint and MNLI loaders, the tokenizer."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from graph_inspector.bert import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    BertTokenizer,
    load_hf_bert,
)
from graph_inspector.mnli import MNLI_LABELS, load_mnli_tsv  # noqa: E402
from phase01_common.checkpoints import minilm_checkpoint_dir  # noqa: E402

HIDDEN_TOL = 1e-4  # Keras BERT vs transformers' BertModel, last hidden state


@pytest.fixture(scope="module")
def minilm():
    import torch
    from transformers import BertModel as HFBertModel

    folder = minilm_checkpoint_dir()
    keras_model, config = load_hf_bert(folder)
    reference = HFBertModel.from_pretrained(folder, local_files_only=True).eval()
    tokenizer = BertTokenizer(folder, max_length=48)

    def both(batch: dict[str, np.ndarray]):
        hidden, pooled = keras_model(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        )
        with torch.no_grad():
            out = reference(**{k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()})
        return (
            (hidden.numpy(), pooled.numpy()),
            (out.last_hidden_state.numpy(), out.pooler_output.numpy()),
        )

    return config, tokenizer, both


def _max_diff_on_real_tokens(ours: np.ndarray, ref: np.ndarray, mask: np.ndarray) -> float:
    # Padding positions are outputs nobody reads; compare where attention_mask is 1.
    return float(np.abs(ours - ref)[mask.astype(bool)].max())


def test_minilm_config_read_from_checkpoint(minilm):
    config, tokenizer, _ = minilm
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
        6,
        384,
        12,
    )
    assert config.vocab_size == tokenizer.vocab_size == 30522


def test_keras_bert_matches_transformers_single_sentences(minilm):
    _, tokenizer, both = minilm
    batch = tokenizer(
        [
            "The quick brown fox jumps over the lazy dog.",
            "Graph mode and eager mode should agree.",
            "Short one",
        ]
    )
    (hidden, pooled), (ref_hidden, ref_pooled) = both(batch)
    assert hidden.shape == ref_hidden.shape == (3, 48, 384)
    assert _max_diff_on_real_tokens(hidden, ref_hidden, batch["attention_mask"]) <= HIDDEN_TOL
    assert float(np.abs(pooled - ref_pooled).max()) <= HIDDEN_TOL


def test_keras_bert_matches_transformers_unpadded_all_positions(minilm):
    _, tokenizer, both = minilm
    batch = tokenizer(["Every position here is a real token, nothing is padding at all"] * 2)
    n_real = int(batch["attention_mask"][0].sum())
    batch = {k: v[:, :n_real] for k, v in batch.items()}  # drop the padding columns
    (hidden, _), (ref_hidden, _) = both(batch)
    assert float(np.abs(hidden - ref_hidden).max()) <= HIDDEN_TOL


def test_keras_bert_matches_transformers_sentence_pairs(minilm):
    _, tokenizer, both = minilm
    batch = tokenizer(
        ["A man is playing a guitar on stage.", "The cat sleeps."],
        ["Someone performs music.", "A dog is barking loudly at the mail carrier."],
    )
    # Second segment is marked with token type 1, the first with 0.
    assert set(np.unique(batch["token_type_ids"])) == {0, 1}
    assert batch["token_type_ids"][0, 0] == 0
    (hidden, pooled), (ref_hidden, ref_pooled) = both(batch)
    assert _max_diff_on_real_tokens(hidden, ref_hidden, batch["attention_mask"]) <= HIDDEN_TOL
    assert float(np.abs(pooled - ref_pooled).max()) <= HIDDEN_TOL


def test_first_traced_call_reads_the_weights():
    """A fresh model called first inside tf.function must still see later weight updates."""
    model = BertForSequenceClassification(BertConfig(vocab_size=50, max_position_embeddings=8), 3)
    ids = tf.constant([[1, 2]], tf.int32)

    @tf.function
    def logits():
        return model(ids, tf.ones_like(ids), tf.zeros_like(ids))

    before = logits().numpy()
    model.classifier.bias.assign(model.classifier.bias + 1.0)
    np.testing.assert_allclose(logits().numpy(), before + 1.0, rtol=0, atol=1e-5)


def test_load_hf_bert_rejects_bad_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint folder not found"):
        load_hf_bert(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_hf_bert(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "roberta"}')
    with pytest.raises(ValueError, match="model_type"):
        BertConfig.from_hf_json(tmp_path / "config.json")
    with pytest.raises(ValueError, match="multiple of"):
        BertConfig(hidden_size=130, num_attention_heads=4)


_TINY_HF = dict(
    vocab_size=20,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=16,
)


@functools.cache
def _tiny_hf_tensors(stored_layers: int) -> dict[str, np.ndarray]:
    # built once per layer count: building a Keras BERT costs seconds on the shared machine
    from graph_inspector.bert import BertModel, _hf_to_keras_pairs

    model = BertModel(BertConfig(**{**_TINY_HF, "num_hidden_layers": stored_layers}))
    return {
        f"bert.{name}": (np.asarray(v).T if transpose else np.asarray(v)).copy()
        for name, v, transpose in _hf_to_keras_pairs(model)
    }


def _write_tiny_hf_checkpoint(folder: Path, stored_layers: int, **extra: np.ndarray) -> None:
    """A Hugging Face style folder: config.json says 2 layers, the weights hold stored_layers."""
    from safetensors.numpy import save_file

    folder.mkdir()
    save_file({**_tiny_hf_tensors(stored_layers), **extra}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", **_TINY_HF}))


def test_load_hf_bert_rejects_weights_the_config_does_not_use(tmp_path):
    # Weights the config does not use (a third layer under a 2-layer config) are refused, not
    # silently dropped.
    _write_tiny_hf_checkpoint(tmp_path / "extra_layer", stored_layers=3)
    with pytest.raises(ValueError, match=r"layers 2 but config.json has num_hidden_layers=2; 16 "):
        load_hf_bert(tmp_path / "extra_layer")
    # Task heads and the position-id buffer are not part of the encoder: ignored, not an error.
    head = {
        "classifier.weight": np.zeros([3, 8], np.float32),
        "bert.embeddings.position_ids": np.arange(16, dtype=np.int64)[None],
    }
    _write_tiny_hf_checkpoint(tmp_path / "task_model", stored_layers=2, **head)
    model, config = load_hf_bert(tmp_path / "task_model")
    assert config.num_hidden_layers == len(model.encoder_layers) == 2
    _write_tiny_hf_checkpoint(
        tmp_path / "stray", stored_layers=2, **{"bert.extra.weight": np.zeros(2, np.float32)}
    )
    with pytest.raises(ValueError, match=r"1 tensor\(s\) unused: extra.weight$"):
        load_hf_bert(tmp_path / "stray")


def test_load_hf_bert_names_a_corrupt_file(tmp_path):
    # A corrupt file is named in the error (not a bare JSONDecodeError / SafetensorError).
    _write_tiny_hf_checkpoint(tmp_path / "ckpt", stored_layers=2)
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"garbage bytes here")
    with pytest.raises(ValueError, match=r"model.safetensors: not a readable safetensors file"):
        load_hf_bert(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json: not valid JSON"):
        load_hf_bert(tmp_path / "ckpt")


def test_bert_config_names_a_wrongly_typed_field(tmp_path):
    # A wrongly typed field is named when the config is read, not as a Keras error in a layer.
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bert", "type_vocab_size": "two"}))
    with pytest.raises(ValueError, match=r"config.json: BertConfig.type_vocab_size must be an int"):
        BertConfig.from_hf_json(path)
    path.write_text(json.dumps({"model_type": "bert", "pad_token_id": None, "hidden_size": 64}))
    assert BertConfig.from_hf_json(path).pad_token_id is None  # null is valid in HF configs
    with pytest.raises(TypeError, match="num_attention_heads must be an integer"):
        BertConfig(num_attention_heads=2.0)


def test_tokenizer_rejects_mismatched_pairs():
    tokenizer = BertTokenizer(minilm_checkpoint_dir(), max_length=16)
    with pytest.raises(ValueError, match="2 first sentences but 1 second"):
        tokenizer(["a", "b"], ["c"])
    with pytest.raises(TypeError, match="list of strings"):
        tokenizer("not a list")


_MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
    "label5\tgold_label"
)


def _mnli_row(i: int, premise: str, hypothesis: str, gold: str) -> str:
    return "\t".join(
        [str(i), "1", f"{i}n", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)"]
        + [premise, hypothesis, gold, gold, gold, gold, gold, gold]
    )


def test_load_mnli_tsv(tmp_path):
    path = tmp_path / "dev_matched.tsv"
    rows = [
        _mnli_row(0, "The cat sat.", "An animal sat.", "entailment"),
        _mnli_row(1, 'He said "no".', "He agreed.", "contradiction"),
        _mnli_row(2, "It rained.", "The game was cancelled.", "neutral"),
        _mnli_row(3, "Ambiguous premise.", "Unclear hypothesis.", "-"),
    ]
    path.write_text("\n".join([_MNLI_HEADER, *rows]) + "\n", encoding="utf-8")
    examples = load_mnli_tsv(path)
    assert len(examples) == 3  # the "-" (no majority) row is skipped
    assert examples.premises == ["The cat sat.", 'He said "no".', "It rained."]
    assert examples.hypotheses[2] == "The game was cancelled."
    assert [MNLI_LABELS[i] for i in examples.labels] == ["entailment", "contradiction", "neutral"]
    # The pairs feed the same tokenizer as sentence pairs.
    batch = BertTokenizer(minilm_checkpoint_dir(), max_length=24)(
        examples.premises, examples.hypotheses
    )
    assert batch["input_ids"].shape == (3, 24) and batch["token_type_ids"].max() == 1


def test_load_mnli_tsv_rejects_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_mnli_tsv(tmp_path / "missing.tsv")
    no_label = tmp_path / "nolabel.tsv"
    no_label.write_text("index\tsentence1\tsentence2\n0\ta\tb\n")
    with pytest.raises(ValueError, match="gold_label"):
        load_mnli_tsv(no_label)
    bad_label = tmp_path / "bad.tsv"
    bad_label.write_text(_MNLI_HEADER + "\n" + _mnli_row(0, "a", "b", "maybe") + "\n")
    with pytest.raises(ValueError, match=r"bad.tsv:2: unknown label 'maybe'"):
        load_mnli_tsv(bad_label)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
