"""Lab 03 part B: the Keras BERT, SavedModel, TFLite and the validator.

Run: ``python test_pipeline.py`` (a few minutes on two cores: the BERT-tiny demo runs once, in
a module-scoped fixture, and the tests re-measure its artefacts independently).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest
import tensorflow as tf
from graph_inspector.bert import BertConfig, BertTokenizer, load_hf_bert
from graph_inspector.mnli import MNLI_LABELS, load_mnli_tsv
from graph_inspector.pipeline import (
    convert_savedmodel,
    export_untracked_module,
    keras_predict,
    run_demo,
)
from graph_inspector.tflite import ConversionError, TFLiteModel, validate_tflite
from phase01_common.checkpoints import minilm_checkpoint_dir

HIDDEN_TOL = 1e-4  # Keras BERT vs transformers' BertModel, last hidden state
TFLITE_FP32_TOL = 1e-4  # TFLite float32 vs TensorFlow, logits
MAX_ACCURACY_DELTA_PP = 0.5  # dynamic-range vs float32, percentage points


# ---------------------------------------------------------------- Keras BERT vs PyTorch


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


def test_tokenizer_rejects_mismatched_pairs():
    tokenizer = BertTokenizer(minilm_checkpoint_dir(), max_length=16)
    with pytest.raises(ValueError, match="2 first sentences but 1 second"):
        tokenizer(["a", "b"], ["c"])
    with pytest.raises(TypeError, match="list of strings"):
        tokenizer("not a list")


# ---------------------------------------------------------------- the pipeline, run once


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("lab03_pipeline"), quick=True)


def test_savedmodel_round_trip_matches(demo):
    loaded = tf.saved_model.load(str(demo.savedmodel_dir))
    signature = loaded.signatures["serving_default"]
    sample = {k: v[:100] for k, v in demo.dev_inputs.items()}
    reloaded = signature(**{k: tf.constant(v) for k, v in sample.items()})["logits"].numpy()
    original = keras_predict(demo.model, sample)
    assert reloaded.shape == (100, len(demo.label_names))
    np.testing.assert_allclose(reloaded, original, rtol=0, atol=1e-5)


def test_tflite_float32_matches_tf_on_100_samples(demo):
    sample = {k: v[:100] for k, v in demo.dev_inputs.items()}
    tf_logits = keras_predict(demo.model, sample)
    tfl_logits = TFLiteModel(demo.conversion.float32_path).predict(sample)
    assert tfl_logits.shape == tf_logits.shape == (100, len(demo.label_names))
    assert float(np.abs(tfl_logits - tf_logits).max()) <= TFLITE_FP32_TOL


def test_dynamic_range_accuracy_within_half_point_of_float32(demo):
    labels = demo.dev_labels
    fp32 = TFLiteModel(demo.conversion.float32_path).predict(demo.dev_inputs)
    dyn = TFLiteModel(demo.conversion.dynamic_range_path).predict(demo.dev_inputs)
    acc_fp32 = float((fp32.argmax(-1) == labels).mean())
    acc_dyn = float((dyn.argmax(-1) == labels).mean())
    assert len(labels) > 400  # the whole dev split, not a sample
    assert abs(100 * (acc_dyn - acc_fp32)) <= MAX_ACCURACY_DELTA_PP
    # The model actually learned the topics (chance is 20%), so the delta means something.
    assert acc_fp32 >= 0.8
    # Dynamic-range really quantized the weights: int8 is about a quarter of float32.
    assert demo.conversion.dynamic_range_bytes < 0.35 * demo.conversion.float32_bytes


def test_validator_catches_keras_variables_in_plain_tf_module(demo, tmp_path):
    # The SavedModel of the trap is fine in TensorFlow...
    seq_len = demo.dev_inputs["input_ids"].shape[1]
    broken_dir = export_untracked_module(demo.model, tmp_path / "untracked", seq_len)
    loaded = tf.saved_model.load(str(broken_dir))
    sample = {k: tf.constant(v[:4]) for k, v in demo.dev_inputs.items()}
    np.testing.assert_allclose(
        loaded.signatures["serving_default"](**sample)["logits"].numpy(),
        keras_predict(demo.model, {k: v[:4] for k, v in demo.dev_inputs.items()}),
        atol=1e-5,
    )
    # ...but its TFLite conversion "succeeds" into a broken model, which must be refused.
    probes = {k: v[:8] for k, v in demo.dev_inputs.items()}
    with pytest.raises(ConversionError, match="failed validation.*(NaN|disagrees|too small)"):
        convert_savedmodel(broken_dir, tmp_path / "tflite", probe_inputs=probes)
    assert not (tmp_path / "tflite" / "model_float32.tflite").exists()


def test_validator_raises_on_nan_model(tmp_path):
    class NaNModel(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.ones((4, 3), np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            # log of a negative number: NaN for every input, a deliberately broken model.
            return {"y": tf.math.log(-tf.abs(tf.matmul(x, self.w)) - 1.0)}

    module = NaNModel()
    tf.saved_model.save(module, str(tmp_path / "nan"), signatures={"serving_default": module.serve})
    with pytest.raises(ConversionError, match="outputs are NaN or infinite"):
        convert_savedmodel(tmp_path / "nan", tmp_path / "out")


def test_validator_raises_when_tflite_disagrees_with_tf(demo):
    probes = {k: v[:16] for k, v in demo.dev_inputs.items()}
    content = demo.conversion.float32_path.read_bytes()

    def shifted_reference(inputs):  # stands in for a conversion that changed the numbers
        return keras_predict(demo.model, inputs) + 0.5

    with pytest.raises(ConversionError, match="disagrees with TensorFlow"):
        validate_tflite(
            content,
            shifted_reference,
            probes,
            quantization="float32",
            param_bytes=demo.conversion.param_bytes,
        )


def test_convert_rejects_paths_that_are_not_savedmodels(tmp_path):
    with pytest.raises(ConversionError, match="does not exist"):
        convert_savedmodel(tmp_path / "nope", tmp_path / "out")
    with pytest.raises(ConversionError, match="not a SavedModel"):
        convert_savedmodel(tmp_path, tmp_path / "out")


def test_demo_reports_measured_table_and_passing_checks(demo):
    failed = [f"{c.name}: {c.measured}" for c in demo.checks if not c.passed]
    assert not failed, failed
    (table,) = demo.tables
    assert len(table.rows) == 3 and not table.has_nan()
    assert all(image.path.is_file() for image in demo.images)
    assert all(ms > 0 for ms in demo.latency_ms.values())


# ---------------------------------------------------------------- MNLI TSV


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
