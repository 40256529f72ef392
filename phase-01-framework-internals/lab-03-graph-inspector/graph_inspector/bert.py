"""A BERT encoder in Keras 3 (TensorFlow backend), small enough to read in one sitting.

The layout follows the original BERT so that any Hugging Face BERT checkpoint loads by name:

    embeddings   word + position + token_type, then LayerNorm
    encoder      N x [ self-attention -> add & LayerNorm -> GELU feed-forward -> add & LayerNorm ]
    pooler       tanh(Dense(hidden of [CLS]))

``call()`` runs under ``tf.function`` so the whole forward pass is one traced graph, which is
what SavedModel and the TFLite converter see. The default configuration is BERT-tiny
(2 layers, hidden 128, 2 heads, intermediate 512) with the vocabulary of the tokenizer it is
used with.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from tokenizers import Tokenizer

# The uncased WordPiece vocabulary of BERT (and MiniLM) has 30522 entries.
BERT_UNCASED_VOCAB_SIZE = 30522


@dataclass
class BertConfig:
    """Hyper-parameters of the encoder; the defaults are BERT-tiny."""

    vocab_size: int = BERT_UNCASED_VOCAB_SIZE
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    pad_token_id: int | None = 0  # recorded only; some Hugging Face configs say null

    def __post_init__(self) -> None:
        # Types first: a JSON string where an int belongs would otherwise surface as a Keras
        # error deep inside layer construction.
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and "None" in str(f.type):
                continue
            want_int = str(f.type).startswith("int")
            ok = (
                isinstance(value, int) and not isinstance(value, bool)
                if want_int
                else isinstance(value, int | float) and not isinstance(value, bool)
            )
            if not ok:
                raise TypeError(
                    f"BertConfig.{f.name} must be {'an integer' if want_int else 'a number'}, "
                    f"got {value!r}"
                )
        for name in ("num_attention_heads", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BertConfig.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads}"
            )
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BertConfig.{name} must be positive, got {getattr(self, name)}")

    @classmethod
    def from_hf_json(cls, path: str | Path) -> BertConfig:
        """Read a Hugging Face ``config.json``; refuse variants this encoder does not implement."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no BERT config.json at {path}")
        try:
            raw = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a JSON object, got {type(raw).__name__}")
        if raw.get("model_type", "bert") != "bert":
            raise ValueError(f"{path}: model_type is {raw.get('model_type')!r}, expected 'bert'")
        if raw.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{path}: hidden_act {raw['hidden_act']!r} (only exact 'gelu')")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only absolute position embeddings are implemented")
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in raw.items() if k in known})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None

    @classmethod
    def from_tokenizer(cls, tokenizer: BertTokenizer, **overrides: object) -> BertConfig:
        """BERT-tiny sized to the tokenizer's vocabulary (and its padding id)."""
        return cls(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id, **overrides)


def _init(config: BertConfig) -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def exact_gelu(x: tf.Tensor) -> tf.Tensor:
    # BERT's "gelu" is the erf form, not the tanh approximation; the difference is ~1e-3,
    # far above the 1e-4 agreement we promise with the PyTorch reference.
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


class BertEmbeddings(keras.layers.Layer):
    def __init__(self, config: BertConfig, **kwargs: object) -> None:
        super().__init__(**kwargs)
        init = _init(config)
        self.word_embeddings = keras.layers.Embedding(
            config.vocab_size, config.hidden_size, embeddings_initializer=init, name="word"
        )
        self.position_embeddings = keras.layers.Embedding(
            config.max_position_embeddings,
            config.hidden_size,
            embeddings_initializer=init,
            name="position",
        )
        self.token_type_embeddings = keras.layers.Embedding(
            config.type_vocab_size, config.hidden_size, embeddings_initializer=init, name="type"
        )
        self.layer_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps)
        self.dropout = keras.layers.Dropout(config.hidden_dropout_prob)

    def call(self, input_ids: tf.Tensor, token_type_ids: tf.Tensor, training: bool = False):
        seq_len = tf.shape(input_ids)[1]
        positions = tf.range(seq_len)[tf.newaxis, :]
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.layer_norm(x), training=training)


class BertSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention followed by the output projection,
    residual and LayerNorm (what Hugging Face splits into ``attention.self``/``.output``)."""

    def __init__(self, config: BertConfig, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        init = _init(config)
        self.query = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="q")
        self.key = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="k")
        self.value = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="v")
        self.output_dense = keras.layers.Dense(
            config.hidden_size, kernel_initializer=init, name="out"
        )
        self.layer_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps)
        self.attention_dropout = keras.layers.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = keras.layers.Dropout(config.hidden_dropout_prob)

    def _split_heads(self, x: tf.Tensor) -> tf.Tensor:
        batch, seq_len = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, seq_len, self.num_heads, self.head_size])
        return tf.transpose(x, [0, 2, 1, 3])  # [batch, heads, seq, head_size]

    def call(self, hidden: tf.Tensor, additive_mask: tf.Tensor, training: bool = False):
        q = self._split_heads(self.query(hidden))
        k = self._split_heads(self.key(hidden))
        v = self._split_heads(self.value(hidden))
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self.head_size)
        probs = tf.nn.softmax(scores + additive_mask, axis=-1)
        probs = self.attention_dropout(probs, training=training)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
        context = tf.reshape(context, tf.shape(hidden))
        out = self.output_dropout(self.output_dense(context), training=training)
        return self.layer_norm(hidden + out)


class BertLayer(keras.layers.Layer):
    def __init__(self, config: BertConfig, **kwargs: object) -> None:
        super().__init__(**kwargs)
        init = _init(config)
        self.attention = BertSelfAttention(config, name="attention")
        self.intermediate = keras.layers.Dense(
            config.intermediate_size, kernel_initializer=init, name="intermediate"
        )
        self.output_dense = keras.layers.Dense(
            config.hidden_size, kernel_initializer=init, name="ffn_out"
        )
        self.layer_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps)
        self.dropout = keras.layers.Dropout(config.hidden_dropout_prob)

    def call(self, hidden: tf.Tensor, additive_mask: tf.Tensor, training: bool = False):
        hidden = self.attention(hidden, additive_mask, training=training)
        ffn = self.output_dense(exact_gelu(self.intermediate(hidden)))
        return self.layer_norm(hidden + self.dropout(ffn, training=training))


class BertModel(keras.Model):
    """The encoder: returns ``(last_hidden_state [b, s, h], pooled [b, h])``."""

    def __init__(self, config: BertConfig, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.config = config
        self.embeddings = BertEmbeddings(config, name="embeddings")
        self.encoder_layers = [
            BertLayer(config, name=f"layer_{i}") for i in range(config.num_hidden_layers)
        ]
        self.pooler = keras.layers.Dense(
            config.hidden_size, activation="tanh", kernel_initializer=_init(config), name="pooler"
        )
        build_eagerly(self)  # variables exist before any trace (see build_eagerly)

    @tf.function(reduce_retracing=True)
    def call(
        self,
        input_ids: tf.Tensor,
        attention_mask: tf.Tensor,
        token_type_ids: tf.Tensor,
        training: bool = False,
    ):
        # Padding positions get a large negative score so softmax gives them ~0 weight.
        # -1e9 rather than float32.min keeps "score + mask" finite (min + negative = -inf).
        mask = tf.cast(attention_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
        additive_mask = (1.0 - mask) * -1e9
        hidden = self.embeddings(input_ids, token_type_ids, training=training)
        for layer in self.encoder_layers:  # a Python loop: unrolled once at trace time
            hidden = layer(hidden, additive_mask, training=training)
        pooled = self.pooler(hidden[:, 0])
        return hidden, pooled


class BertForSequenceClassification(keras.Model):
    """BERT encoder + dropout + linear head on the pooled [CLS] vector; returns logits."""

    def __init__(
        self,
        config: BertConfig,
        num_labels: int,
        encoder: BertModel | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        if num_labels < 2:
            raise ValueError(f"num_labels must be at least 2, got {num_labels}")
        self.config = config
        self.num_labels = num_labels
        self.bert = encoder if encoder is not None else BertModel(config, name="bert")
        self.dropout = keras.layers.Dropout(config.hidden_dropout_prob)
        self.classifier = keras.layers.Dense(
            num_labels, kernel_initializer=_init(config), name="classifier"
        )
        build_eagerly(self)

    @tf.function(reduce_retracing=True)
    def call(
        self,
        input_ids: tf.Tensor,
        attention_mask: tf.Tensor,
        token_type_ids: tf.Tensor,
        training: bool = False,
    ):
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids, training=training)
        return self.classifier(self.dropout(pooled, training=training))


def build_eagerly(model: keras.Model) -> None:
    """Run one forward pass with tf.function switched off, so Keras creates the variables.

    If the variables are instead created by the first call *inside* ``call``'s tf.function,
    that trace computes their initial values rather than reading them: later calls at that
    input shape silently ignore every weight update. Building eagerly leaves no such trace.
    """
    ids = tf.zeros([1, 2], tf.int32)
    was_eager = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        model(ids, tf.ones_like(ids), tf.zeros_like(ids))
    finally:
        tf.config.run_functions_eagerly(was_eager)


# ---------------------------------------------------------------- checkpoint loading


def _hf_to_keras_pairs(model: BertModel) -> list[tuple[str, keras.Variable, bool]]:
    """(Hugging Face tensor name, our variable, transpose?) for every weight of the encoder.

    torch.nn.Linear stores weight as [out, in]; keras Dense kernels are [in, out].
    """
    pairs: list[tuple[str, keras.Variable, bool]] = []

    def dense(prefix: str, layer: keras.layers.Dense) -> None:
        pairs.append((f"{prefix}.weight", layer.kernel, True))
        pairs.append((f"{prefix}.bias", layer.bias, False))

    def norm(prefix: str, layer: keras.layers.LayerNormalization) -> None:
        pairs.append((f"{prefix}.weight", layer.gamma, False))
        pairs.append((f"{prefix}.bias", layer.beta, False))

    emb = model.embeddings
    pairs.append(("embeddings.word_embeddings.weight", emb.word_embeddings.embeddings, False))
    pairs.append(
        ("embeddings.position_embeddings.weight", emb.position_embeddings.embeddings, False)
    )
    pairs.append(
        ("embeddings.token_type_embeddings.weight", emb.token_type_embeddings.embeddings, False)
    )
    norm("embeddings.LayerNorm", emb.layer_norm)
    for i, layer in enumerate(model.encoder_layers):
        p = f"encoder.layer.{i}"
        att = layer.attention
        dense(f"{p}.attention.self.query", att.query)
        dense(f"{p}.attention.self.key", att.key)
        dense(f"{p}.attention.self.value", att.value)
        dense(f"{p}.attention.output.dense", att.output_dense)
        norm(f"{p}.attention.output.LayerNorm", att.layer_norm)
        dense(f"{p}.intermediate.dense", layer.intermediate)
        dense(f"{p}.output.dense", layer.output_dense)
        norm(f"{p}.output.LayerNorm", layer.layer_norm)
    dense("pooler.dense", model.pooler)
    return pairs


# Checkpoint tensors the encoder legitimately does not use: the heads of task models (masked-LM
# and next-sentence "cls.", classification "classifier.", question answering "qa_outputs.") and
# the constant position-id buffer older transformers versions saved. Any other unused tensor
# means config.json and the weights disagree (e.g. 2 layers configured, 6 stored).
_IGNORED_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
_IGNORED_NAMES = ("embeddings.position_ids",)
_LAYER = re.compile(r"encoder\.layer\.(\d+)\.")


def load_hf_bert(checkpoint_dir: str | Path) -> tuple[BertModel, BertConfig]:
    """Build a :class:`BertModel` from a Hugging Face BERT folder (config.json + model.safetensors).

    Accepts both bare ``BertModel`` checkpoints and ones saved from a task model (names prefixed
    with ``bert.``; the task head is ignored). Every encoder weight must be present with the
    expected shape, and every stored tensor must be used (task heads and the position-id buffer
    aside): weights for more layers than config.json describes are an error, not dropped. A
    checkpoint without a pooler keeps the pooler's random initialisation.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {checkpoint_dir}")
    weights_path = checkpoint_dir / "model.safetensors"
    if not weights_path.is_file():
        raise FileNotFoundError(f"{checkpoint_dir} has no model.safetensors")
    config = BertConfig.from_hf_json(checkpoint_dir / "config.json")
    try:
        stored = load_file(str(weights_path))
    except SafetensorError as exc:
        raise ValueError(f"{weights_path}: not a readable safetensors file ({exc})") from None
    tensors = {k.removeprefix("bert."): v for k, v in stored.items()}

    model = BertModel(config, name="bert")  # builds its variables eagerly
    pairs = _hf_to_keras_pairs(model)
    used = {hf_name for hf_name, _, _ in pairs}
    for hf_name, variable, transpose in pairs:
        if hf_name not in tensors:
            if hf_name.startswith("pooler."):
                continue
            raise KeyError(f"{weights_path}: missing tensor {hf_name!r}")
        value = tensors[hf_name].astype(np.float32)
        if transpose:
            value = value.T
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"{weights_path}: {hf_name} has shape {value.shape}, "
                f"the config implies {tuple(variable.shape)}"
            )
        variable.assign(value)
    unused = sorted(
        name
        for name in tensors
        if name not in used
        and name not in _IGNORED_NAMES
        and not name.startswith(_IGNORED_PREFIXES)
    )
    if unused:
        extra_layers = sorted({int(m[1]) for n in unused if (m := _LAYER.match(n))})
        hint = (
            f"weights for layers {', '.join(map(str, extra_layers))} but config.json has "
            f"num_hidden_layers={config.num_hidden_layers}; "
            if extra_layers
            else ""
        )
        more = f", … (+{len(unused) - 3} more)" if len(unused) > 3 else ""
        shown = ", ".join(unused[:3]) + more
        raise ValueError(f"{weights_path}: {hint}{len(unused)} tensor(s) unused: {shown}")
    return model, config


# ---------------------------------------------------------------- tokenization


class BertTokenizer:
    """WordPiece tokenization from a checkpoint's ``tokenizer.json`` (Hugging Face tokenizers).

    Returns int32 arrays padded/truncated to ``max_length``: what the model and the exported
    serving signature take. Pairs get ``token_type_ids`` 0 for the first segment, 1 for the second.
    """

    def __init__(self, tokenizer_json: str | Path, max_length: int = 128) -> None:
        tokenizer_json = Path(tokenizer_json)
        if tokenizer_json.is_dir():
            tokenizer_json = tokenizer_json / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {tokenizer_json}")
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2 ([CLS] and [SEP]), got {max_length}")
        self.max_length = max_length
        self._tok = Tokenizer.from_file(str(tokenizer_json))
        pad_id = self._tok.token_to_id("[PAD]")
        if pad_id is None:
            raise ValueError(f"{tokenizer_json} has no [PAD] token; is it a BERT tokenizer?")
        self.pad_id = pad_id
        self.vocab_size = self._tok.get_vocab_size()
        self._tok.enable_truncation(max_length=max_length)
        self._tok.enable_padding(length=max_length, pad_id=pad_id, pad_token="[PAD]")

    def __call__(
        self, texts: list[str], text_pairs: list[str] | None = None
    ) -> dict[str, np.ndarray]:
        if isinstance(texts, str):
            raise TypeError("pass a list of strings, not a single string")
        if text_pairs is not None:
            if len(text_pairs) != len(texts):
                raise ValueError(
                    f"{len(texts)} first sentences but {len(text_pairs)} second sentences"
                )
            encodings = self._tok.encode_batch(list(zip(texts, text_pairs, strict=True)))
        else:
            encodings = self._tok.encode_batch(list(texts))
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int32),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int32),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int32),
        }
