"""Question 4: fine-tuning a pretrained transformer for text classification.

Recipe (run for real on the embedded all-MiniLM-L6-v2 checkpoint and BBC News):

1. Load the pretrained encoder and **replace the classification head** with a fresh
   ``nn.Linear(hidden, num_labels)`` for our labels.
2. **Phase one** — freeze the base (``requires_grad = False``) and train only the head at its
   own, high learning rate: the random head cannot wreck the pretrained features, because no
   gradient reaches them (frozen parameters get ``.grad is None`` and keep their values).
3. **Phase two** — unfreeze everything and fine-tune with **layer-wise learning-rate decay**
   (LLRD): the head keeps its own rate, encoder layer i trains at base_lr · decay^(L−1−i)
   (the top layer at base_lr), the embeddings below the lowest layer at base_lr · decay^L.
   Lower layers hold general features and should move less. Biases and normalisation weights
   get no weight decay (decaying a LayerNorm gain towards 0 or a bias towards 0 is not a
   sensible prior).

:func:`layerwise_lr_param_groups` is the reusable part: it works on any Hugging Face-style
model whose layers it can locate (see :data:`LAYER_STACK_NAMES`) and refuses others clearly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

# Where encoder/decoder blocks live in common Hugging Face models, tried in this order:
# BERT / RoBERTa / ELECTRA / DeBERTa / XLM-R / ViT: ``encoder.layer.N``;
# DistilBERT: ``transformer.layer.N``; BART encoder, Llama, Mistral, Qwen: ``layers.N``;
# GPT-2 / GPT-J / Falcon: ``h.N``; T5: ``block.N``.
LAYER_STACK_NAMES: tuple[str, ...] = ("encoder.layer", "transformer.layer", "layers", "h", "block")

# Parameters of modules whose class name contains "Norm" get no weight decay
# (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, LlamaRMSNorm, T5LayerNorm ...).
_NORM_CLASS_MARKER = "Norm"
# GPT-2 names its embeddings wte / wpe, T5 its token embedding `shared`; everyone else says
# "embed".
_EMBEDDING_COMPONENTS = ("wte", "wpe", "shared")
# DeBERTa-v2 keeps relative-position embeddings beside its layers (`encoder.rel_embeddings`)
# and normalises them with a sibling `encoder.LayerNorm`: that norm goes with the embeddings.
_RELATIVE_EMBEDDING_NAME = "rel_embeddings"


def _layer_regex(stack_name: str) -> re.Pattern[str]:
    # The stack is everything up to the index, so ``encoder.layers`` and ``decoder.layers``
    # are told apart (LLRD over two stacks has no single "lowest layer"). Non-greedy: the
    # outermost match wins when a block nests another numbered list.
    return re.compile(rf"^(?P<stack>(?:.+?\.)?{re.escape(stack_name)})\.(?P<index>\d+)\.")


def find_layer_indices(parameter_names: Sequence[str]) -> tuple[str, dict[str, int]]:
    """Locate the transformer blocks: returns (stack prefix, {parameter name: layer index}).

    Raises ValueError naming what was tried when no known naming matches, or when two stacks
    (for example an encoder and a decoder) match the same naming.
    """
    for stack_name in LAYER_STACK_NAMES:
        regex = _layer_regex(stack_name)
        matches = {name: regex.match(name) for name in parameter_names}
        matches = {name: m for name, m in matches.items() if m is not None}
        if not matches:
            continue
        stacks = sorted({m["stack"] for m in matches.values()})
        if len(stacks) > 1:
            raise ValueError(
                f"found {len(stacks)} layer stacks named like '{stack_name}.N' "
                f"({', '.join(stacks)}); layer-wise decay needs one ordered stack of layers"
            )
        return stacks[0], {name: int(m["index"]) for name, m in matches.items()}
    sample = ", ".join(list(parameter_names)[:6]) or "(no parameters)"
    tried = ", ".join(f"'{s}.N'" for s in LAYER_STACK_NAMES)
    raise ValueError(
        f"cannot find the transformer layers: no parameter name contains {tried}. "
        f"First parameter names: {sample}. Add the model's naming to LAYER_STACK_NAMES."
    )


def _is_embedding(name: str) -> bool:
    components = name.split(".")
    return any("embed" in c for c in components) or any(
        c in _EMBEDDING_COMPONENTS for c in components
    )


def _embedding_norm_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Prefixes of normalisation modules that normalise an embedding table kept outside the
    embeddings module (DeBERTa-v2's ``encoder.LayerNorm`` beside ``encoder.rel_embeddings``)."""
    prefixes = []
    for module_name, module in model.named_modules():
        if not isinstance(getattr(module, _RELATIVE_EMBEDDING_NAME, None), nn.Embedding):
            continue
        for child_name, child in module.named_children():
            if _NORM_CLASS_MARKER in type(child).__name__:
                prefixes.append(f"{module_name}.{child_name}." if module_name else f"{child_name}.")
    return tuple(prefixes)


def _no_decay_parameter_names(model: nn.Module) -> set[str]:
    """Biases and the weights of normalisation layers (found by module type, not by name)."""
    names = set()
    for module_name, module in model.named_modules():
        is_norm = _NORM_CLASS_MARKER in type(module).__name__
        for param_name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{param_name}" if module_name else param_name
            if is_norm or param_name == "bias":
                names.add(full)
    return names


def head_parameter_names(model: nn.Module, head_prefixes: Sequence[str] | None) -> set[str]:
    """Names of the task head's parameters.

    Without ``head_prefixes``, a Hugging Face model's head is whatever is not under its
    ``base_model_prefix`` (``bert.``, ``distilbert.`` ...): classifier, pre_classifier, score.
    """
    names = [name for name, _ in model.named_parameters()]
    if head_prefixes is None:
        base_prefix = getattr(model, "base_model_prefix", None)
        if not base_prefix or not any(n.startswith(f"{base_prefix}.") for n in names):
            raise ValueError(
                f"{type(model).__name__} has no Hugging Face base_model_prefix to tell the base "
                "from the head; pass head_prefixes=('classifier', ...)"
            )
        return {n for n in names if not n.startswith(f"{base_prefix}.")}
    head = {n for n in names if any(n == p or n.startswith(f"{p}.") for p in head_prefixes)}
    if not head:
        raise ValueError(f"no parameter starts with any of head_prefixes={list(head_prefixes)}")
    return head


def layerwise_lr_param_groups(
    model: nn.Module,
    *,
    base_lr: float,
    head_lr: float,
    decay: float,
    weight_decay: float = 0.01,
    head_prefixes: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Optimizer parameter groups with layer-wise learning-rate decay.

    - head: ``head_lr``;
    - encoder layer i of L: ``base_lr * decay ** (L - 1 - i)``;
    - parameters of the base above the top layer (pooler, final norm): ``base_lr``;
    - embeddings: ``base_lr * decay ** L`` (below the lowest layer);
    - biases and normalisation weights: ``weight_decay = 0``, the rest ``weight_decay``.

    Only parameters with ``requires_grad`` are included. Each group carries a ``name`` and the
    ``param_names`` it holds (torch optimizers keep extra keys), so the result can be checked.
    """
    if not (base_lr > 0 and head_lr > 0):
        raise ValueError(
            f"learning rates must be positive, got base_lr={base_lr}, head_lr={head_lr}"
        )
    if not 0 < decay <= 1:
        raise ValueError(f"decay must be in (0, 1], got {decay}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {weight_decay}")

    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError(f"{type(model).__name__} has no parameter with requires_grad=True")
    head = head_parameter_names(model, head_prefixes)
    # L is the model's depth, found from *all* parameter names: with the top layers frozen,
    # the trainable ones alone would understate it and shift every layer's rate.
    all_names = [n for n, _ in model.named_parameters() if n not in head]
    _, layer_of = find_layer_indices(all_names)
    num_layers = max(layer_of.values()) + 1
    no_decay = _no_decay_parameter_names(model)
    embedding_norms = _embedding_norm_prefixes(model)

    groups: dict[tuple[str, bool], dict[str, Any]] = {}
    for name, param in named:
        if name in head:
            key, lr = "head", head_lr
        elif name in layer_of:
            index = layer_of[name]
            key, lr = f"layer.{index}", base_lr * decay ** (num_layers - 1 - index)
        elif _is_embedding(name) or name.startswith(embedding_norms):
            key, lr = "embeddings", base_lr * decay**num_layers
        else:
            key, lr = "above_layers", base_lr
        decays = name not in no_decay
        group = groups.setdefault(
            (key, decays),
            {
                "name": f"{key}/{'decay' if decays else 'no_decay'}",
                "lr": lr,
                "weight_decay": weight_decay if decays else 0.0,
                "params": [],
                "param_names": [],
            },
        )
        group["params"].append(param)
        group["param_names"].append(name)
    return list(groups.values())


def describe_param_groups(groups: Sequence[dict[str, Any]]) -> list[list[object]]:
    """Rows of (group, learning rate, weight decay, tensors, parameters) for printing."""
    return [
        [
            g["name"],
            g["lr"],
            g["weight_decay"],
            len(g["params"]),
            sum(p.numel() for p in g["params"]),
        ]
        for g in groups
    ]


# --------------------------------------------------------------------------------------------
# The model: pretrained encoder, fresh head.


def replace_classification_head(model: nn.Module, num_labels: int) -> nn.Linear:
    """Swap the model's final classification Linear for a fresh one with ``num_labels`` outputs."""
    if num_labels < 2:
        raise ValueError(f"num_labels must be at least 2, got {num_labels}")
    for attribute in ("classifier", "score", "head"):
        head = getattr(model, attribute, None)
        if isinstance(head, nn.Linear):
            new_head = nn.Linear(head.in_features, num_labels)
            setattr(model, attribute, new_head)
            break
        if isinstance(getattr(head, "out_proj", None), nn.Linear):  # RoBERTa-style head
            new_head = nn.Linear(head.out_proj.in_features, num_labels)
            head.out_proj = new_head
            break
    else:
        raise ValueError(
            f"{type(model).__name__} has no classification head named classifier, score or head "
            "ending in nn.Linear"
        )
    if hasattr(model, "config"):  # keep the config truthful for save_pretrained / the loss
        model.config.num_labels = num_labels
        model.num_labels = num_labels
    return new_head


def load_minilm_classifier(num_labels: int, seed: int = 0) -> tuple[nn.Module, Any]:
    """all-MiniLM-L6-v2 from its local folder with a fresh ``num_labels``-way head."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    from phase01_common.checkpoints import minilm_checkpoint_dir

    folder = minilm_checkpoint_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    # Silence the "classifier newly initialised" load report and progress bar for this call
    # only (the demo runs other labs in the same process).
    verbosity = transformers.logging.get_verbosity()
    progress_bar = transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        # The checkpoint is a bare BertModel; from_pretrained adds a random head which we
        # replace explicitly, as one would for a model that came with another task's head.
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            folder, num_labels=2, local_files_only=True
        )
    finally:
        transformers.logging.set_verbosity(verbosity)
        if progress_bar:
            transformers.utils.logging.enable_progress_bar()
    torch.manual_seed(seed)
    replace_classification_head(model, num_labels)
    return model, tokenizer


def set_base_trainable(
    model: nn.Module, trainable: bool, head_prefixes: Sequence[str] | None = None
) -> None:
    """Freeze (``False``) or unfreeze (``True``) every parameter outside the head."""
    head = head_parameter_names(model, head_prefixes)
    for name, param in model.named_parameters():
        param.requires_grad_(True if name in head else trainable)


# --------------------------------------------------------------------------------------------
# Training.


@dataclass(frozen=True)
class FineTuneConfig:
    """The recipe's settings: data sizes, the two phases' epochs (a fixed number of steps,
    so a run is deterministic given the seed) and learning rates. The inference pipeline
    trains its model with this same type and :func:`phase_one` / :func:`phase_two`."""

    train_per_label: int = 30
    dev_per_label: int = 30
    max_length: int = 48
    batch_size: int = 16
    phase_one_epochs: int = 2
    phase_two_epochs: int = 1
    head_lr: float = 3e-2
    base_lr: float = 1.5e-4
    decay: float = 0.8
    weight_decay: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("train_per_label", "dev_per_label", "max_length", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"FineTuneConfig.{name} must be at least 1, got {getattr(self, name)}"
                )
        if self.phase_one_epochs < 0 or self.phase_two_epochs < 0:
            raise ValueError("FineTuneConfig epochs must be non-negative")

    def key(self) -> str:
        """A hash of every setting (a cache key for the weights these settings train)."""
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class FineTuneResult:
    label_names: tuple[str, ...]
    train_size: int
    dev_size: int
    phase_one_losses: list[float]  # per training step (train mode, dropout on)
    phase_two_losses: list[float]
    # Eval-mode loss on a fixed slice of the training set: noise-free "does the loss fall".
    probe_loss: dict[str, float]
    accuracy: dict[str, float]  # held-out dev accuracy: before, after_phase_one, after_phase_two
    frozen_count: int
    frozen_with_grad: list[str]  # must stay empty
    frozen_changed: list[str]  # must stay empty
    head_changed: bool
    phase_two_without_grad: list[str]  # must stay empty
    phase_two_unchanged: list[str]  # must stay empty
    group_rows: list[list[object]]
    group_lrs: dict[str, float]
    num_layers: int
    seconds: dict[str, float] = field(default_factory=dict)


def encode(tokenizer: Any, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
    if not texts:
        raise ValueError("no texts to encode")
    return dict(
        tokenizer(
            list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt"
        )
    )


def _batches(size: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """A shuffled epoch in near-equal batches (no noisy 2-example tail batch)."""
    order = torch.randperm(size, generator=generator)
    return list(torch.tensor_split(order, math.ceil(size / batch_size)))


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    labels: torch.Tensor,
) -> float:
    """One optimisation step. Gradients are cleared *before* backward, so after the call each
    trainable parameter's ``.grad`` holds this step's gradient (and frozen ones stay None)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = model(**batch, labels=labels).loss
    loss.backward()
    optimizer.step()
    return loss.item()


def train_epochs(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
) -> list[float]:
    """Plain shuffled mini-batch training; returns the loss of every step."""
    if epochs < 0 or batch_size < 1:
        raise ValueError(f"need epochs >= 0 and batch_size >= 1, got {epochs}, {batch_size}")
    losses = []
    for _ in range(epochs):
        for index in _batches(len(labels), batch_size, generator):
            batch = {k: v[index] for k, v in inputs.items()}
            losses.append(train_step(model, optimizer, batch, labels[index]))
    return losses


@torch.no_grad()
def predict(
    model: nn.Module, inputs: dict[str, torch.Tensor], batch_size: int = 32
) -> torch.Tensor:
    model.eval()
    size = len(inputs["input_ids"])
    logits = [
        model(**{k: v[i : i + batch_size] for k, v in inputs.items()}).logits
        for i in range(0, size, batch_size)
    ]
    return torch.cat(logits).argmax(dim=-1)


@torch.no_grad()
def mean_loss(model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor) -> float:
    """Loss in eval mode (no dropout), so before/after comparisons are not noise."""
    model.eval()
    return model(**inputs, labels=labels).loss.item()


def accuracy(model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor) -> float:
    return (predict(model, inputs) == labels).float().mean().item()


def phase_one(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    config: FineTuneConfig,
    generator: torch.Generator,
) -> list[float]:
    """Phase one: base frozen, the head alone at ``head_lr`` (AdamW); the loss of every step."""
    set_base_trainable(model, False)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.head_lr,
        weight_decay=config.weight_decay,
    )
    return train_epochs(
        model, optimizer, inputs, labels, config.phase_one_epochs, config.batch_size, generator
    )


def phase_two(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    config: FineTuneConfig,
    generator: torch.Generator,
) -> tuple[list[float], list[dict[str, Any]]]:
    """Phase two: everything trainable, layer-wise decayed learning rates (AdamW); the loss
    of every step and the parameter groups."""
    set_base_trainable(model, True)
    groups = layerwise_lr_param_groups(
        model,
        base_lr=config.base_lr,
        head_lr=config.head_lr,
        decay=config.decay,
        weight_decay=config.weight_decay,
    )
    optimizer = torch.optim.AdamW(groups)
    losses = train_epochs(
        model, optimizer, inputs, labels, config.phase_two_epochs, config.batch_size, generator
    )
    return losses, groups


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def run_finetune(config: FineTuneConfig) -> FineTuneResult:
    """Both phases on a stratified BBC News subset; accuracy measured on held-out dev articles."""
    from phase01_common.bbc_news import load_bbc_news

    seconds: dict[str, float] = {}
    start = time.perf_counter()
    data = load_bbc_news(seed=config.seed).take(config.train_per_label, config.dev_per_label)
    model, tokenizer = load_minilm_classifier(data.num_labels, seed=config.seed)
    train_inputs = encode(tokenizer, data.train_texts, config.max_length)
    dev_inputs = encode(tokenizer, data.dev_texts, config.max_length)
    train_labels = torch.as_tensor(np.asarray(data.train_labels))
    dev_labels = torch.as_tensor(np.asarray(data.dev_labels))
    probe = slice(0, min(32, len(train_labels)))
    probe_inputs = {k: v[probe] for k, v in train_inputs.items()}
    probe_labels = train_labels[probe]
    generator = torch.Generator().manual_seed(config.seed)
    seconds["load"] = time.perf_counter() - start

    probe_loss = {"before": mean_loss(model, probe_inputs, probe_labels)}
    accuracies = {"before": accuracy(model, dev_inputs, dev_labels)}

    # Phase one: base frozen, head alone at head_lr.
    start = time.perf_counter()
    head = head_parameter_names(model, None)
    frozen = [n for n, _ in model.named_parameters() if n not in head]
    before_one = _snapshot(model)
    phase_one_losses = phase_one(model, train_inputs, train_labels, config, generator)
    params = dict(model.named_parameters())
    frozen_with_grad = [n for n in frozen if params[n].grad is not None]
    frozen_changed = [n for n in frozen if not torch.equal(params[n], before_one[n])]
    head_changed = all(not torch.equal(params[n], before_one[n]) for n in head)
    del before_one
    probe_loss["after_phase_one"] = mean_loss(model, probe_inputs, probe_labels)
    accuracies["after_phase_one"] = accuracy(model, dev_inputs, dev_labels)
    seconds["phase_one"] = time.perf_counter() - start

    # Phase two: everything trainable, layer-wise decayed learning rates.
    start = time.perf_counter()
    before_two = _snapshot(model)
    _, layer_of = find_layer_indices(list(params))
    phase_two_losses, groups = phase_two(model, train_inputs, train_labels, config, generator)
    without_grad = [n for n, p in params.items() if p.grad is None]
    unchanged = [n for n, p in params.items() if torch.equal(p, before_two[n])]
    del before_two
    probe_loss["after_phase_two"] = mean_loss(model, probe_inputs, probe_labels)
    accuracies["after_phase_two"] = accuracy(model, dev_inputs, dev_labels)
    seconds["phase_two"] = time.perf_counter() - start

    return FineTuneResult(
        label_names=data.label_names,
        train_size=len(train_labels),
        dev_size=len(dev_labels),
        phase_one_losses=phase_one_losses,
        phase_two_losses=phase_two_losses,
        probe_loss=probe_loss,
        accuracy=accuracies,
        frozen_count=len(frozen),
        frozen_with_grad=frozen_with_grad,
        frozen_changed=frozen_changed,
        head_changed=head_changed,
        phase_two_without_grad=without_grad,
        phase_two_unchanged=unchanged,
        group_rows=describe_param_groups(groups),
        group_lrs={g["name"]: g["lr"] for g in groups},
        num_layers=max(layer_of.values()) + 1,
        seconds=seconds,
    )
