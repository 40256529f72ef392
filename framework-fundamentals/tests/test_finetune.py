"""Question 4: layer-wise learning-rate groups, and both fine-tuning phases on real MiniLM.

The parameter-group rules are checked on tiny randomly initialised Hugging Face models (one
per naming scheme, built in milliseconds); the freezing and training behaviour on the real
all-MiniLM-L6-v2 checkpoint with a 10-article BBC News batch, 32 tokens, a few steps.
"""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers  # noqa: E402
from fundamentals import finetune as ft  # noqa: E402

BASE_LR, HEAD_LR, DECAY = 1e-4, 1e-2, 0.5


def _tiny(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=50, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
            intermediate_size=16, max_position_embeddings=16, num_labels=3,
        )  # fmt: skip
        return transformers.BertForSequenceClassification(config)
    if kind == "roberta":
        config = transformers.RobertaConfig(
            vocab_size=50, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
            intermediate_size=16, max_position_embeddings=20, num_labels=3,
        )  # fmt: skip
        return transformers.RobertaForSequenceClassification(config)
    if kind == "distilbert":
        config = transformers.DistilBertConfig(
            vocab_size=50, dim=8, n_layers=3, n_heads=2, hidden_dim=16,
            max_position_embeddings=16, num_labels=3,
        )  # fmt: skip
        return transformers.DistilBertForSequenceClassification(config)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=50, n_embd=8, n_layer=3, n_head=2, n_positions=16, num_labels=3,
            bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        return transformers.GPT2ForSequenceClassification(config)
    raise ValueError(kind)


def _lr_by_parameter(groups):
    table = {}
    for group in groups:
        for name in group["param_names"]:
            assert name not in table, f"{name} is in two groups"
            table[name] = (group["lr"], group["weight_decay"])
    return table


@pytest.mark.parametrize(
    ("kind", "layer_part", "embedding_part", "head_names"),
    [
        ("bert", "bert.encoder.layer.{i}.", "bert.embeddings.", {"classifier"}),
        ("roberta", "roberta.encoder.layer.{i}.", "roberta.embeddings.", {"classifier"}),
        ("distilbert", "distilbert.transformer.layer.{i}.", "distilbert.embeddings.",
         {"pre_classifier", "classifier"}),
        ("gpt2", "transformer.h.{i}.", "transformer.w", {"score"}),
    ],
)  # fmt: skip
def test_group_learning_rates_follow_the_layer_depth(kind, layer_part, embedding_part, head_names):
    model = _tiny(kind)
    groups = ft.layerwise_lr_param_groups(
        model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY, weight_decay=0.01
    )
    table = _lr_by_parameter(groups)
    names = [n for n, _ in model.named_parameters()]
    assert set(table) == set(names), "every trainable parameter must be in exactly one group"
    num_layers = 3
    for name in names:
        lr, _ = table[name]
        if name.split(".")[0] in head_names:
            expected = HEAD_LR
        elif any(name.startswith(layer_part.format(i=i)) for i in range(num_layers)):
            i = next(i for i in range(num_layers) if name.startswith(layer_part.format(i=i)))
            expected = BASE_LR * DECAY ** (num_layers - 1 - i)
        elif name.startswith(embedding_part):
            expected = BASE_LR * DECAY**num_layers
        else:  # pooler / final norm, above the top layer
            expected = BASE_LR
        assert lr == pytest.approx(expected, rel=1e-12), name


def test_t5_and_deberta_embeddings_get_the_embedding_rate():
    # T5 calls its token embedding `shared`; DeBERTa-v2 keeps relative-position embeddings and
    # the LayerNorm applied to them beside its layers (encoder.rel_embeddings, encoder.LayerNorm).
    torch.manual_seed(0)
    t5 = transformers.T5EncoderModel(
        transformers.T5Config(vocab_size=50, d_model=8, d_kv=4, d_ff=16, num_layers=3, num_heads=2)
    )
    t5_table = _lr_by_parameter(
        ft.layerwise_lr_param_groups(
            t5,
            base_lr=BASE_LR,
            head_lr=HEAD_LR,
            decay=DECAY,
            head_prefixes=("encoder.final_layer_norm",),  # an encoder alone has no head
        )
    )
    assert t5_table["shared.weight"][0] == pytest.approx(BASE_LR * DECAY**3)
    assert t5_table["encoder.block.0.layer.0.SelfAttention.q.weight"][0] == pytest.approx(
        BASE_LR * DECAY**2
    )
    config = transformers.DebertaV2Config(
        vocab_size=50, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=16, max_position_embeddings=16, num_labels=3, relative_attention=True,
        norm_rel_ebd="layer_norm", position_buckets=8, max_relative_positions=16,
        pooler_hidden_size=8,
    )  # fmt: skip
    deberta = transformers.DebertaV2ForSequenceClassification(config)
    table = _lr_by_parameter(
        ft.layerwise_lr_param_groups(deberta, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY)
    )
    assert set(table) == {n for n, _ in deberta.named_parameters()}
    for name in (
        "deberta.embeddings.word_embeddings.weight",
        "deberta.encoder.rel_embeddings.weight",
        "deberta.encoder.LayerNorm.weight",
        "deberta.encoder.LayerNorm.bias",
    ):
        assert table[name][0] == pytest.approx(BASE_LR * DECAY**3), name
    assert table["deberta.encoder.LayerNorm.weight"][1] == 0.0  # a norm: no weight decay
    assert table["pooler.dense.weight"][0] == HEAD_LR  # outside the base model: the head's


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_no_weight_decay_on_biases_and_norm_weights(kind):
    model = _tiny(kind)
    table = _lr_by_parameter(
        ft.layerwise_lr_param_groups(model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY)
    )
    norm_params = {
        f"{module_name}.{p}"
        for module_name, module in model.named_modules()
        if isinstance(module, torch.nn.LayerNorm)
        for p, _ in module.named_parameters(recurse=False)
    }
    assert norm_params, "the tiny model should contain LayerNorms"
    for name, (_, weight_decay) in table.items():
        expected = 0.0 if name.endswith("bias") or name in norm_params else 0.01
        assert weight_decay == expected, name


def test_frozen_parameters_are_left_out_of_the_groups():
    model = _tiny("bert")
    ft.set_base_trainable(model, False)
    # only the head is trainable: the groups hold the head alone, at its own rate
    table = _lr_by_parameter(
        ft.layerwise_lr_param_groups(model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY)
    )
    assert table and all(name.startswith("classifier.") for name in table)
    assert {lr for lr, _ in table.values()} == {HEAD_LR}
    ft.set_base_trainable(model, True)
    assert len(_lr_by_parameter(
        ft.layerwise_lr_param_groups(model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY)
    )) == len(list(model.parameters()))  # fmt: skip


def test_frozen_top_layers_do_not_change_the_model_depth():
    """L counts the model's layers, not the trainable ones: freezing layers 1-2 of a 3-layer
    model leaves layer 0 at base_lr * decay**2 and the embeddings at base_lr * decay**3."""
    model = _tiny("bert")
    for name, param in model.named_parameters():
        if name.startswith(("bert.encoder.layer.1.", "bert.encoder.layer.2.")):
            param.requires_grad_(False)
    table = _lr_by_parameter(
        ft.layerwise_lr_param_groups(model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY)
    )
    assert not any(".layer.1." in n or ".layer.2." in n for n in table)  # groups: trainable only
    layer0 = [lr for n, (lr, _) in table.items() if n.startswith("bert.encoder.layer.0.")]
    embeddings = [lr for n, (lr, _) in table.items() if n.startswith("bert.embeddings.")]
    assert layer0 and layer0 == pytest.approx([BASE_LR * DECAY**2] * len(layer0))
    assert embeddings and embeddings == pytest.approx([BASE_LR * DECAY**3] * len(embeddings))


def test_unknown_layer_naming_fails_with_a_clear_message():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="cannot find the transformer layers.*0.weight"):
        ft.layerwise_lr_param_groups(
            model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY, head_prefixes=("2",)
        )
    with pytest.raises(ValueError, match="base_model_prefix.*head_prefixes"):
        ft.layerwise_lr_param_groups(model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=DECAY)


@pytest.mark.parametrize(
    ("names", "stack", "indices"),
    [
        (["model.embed_tokens.weight", "model.layers.0.mlp.w", "model.layers.1.mlp.w"],
         "model.layers", [0, 1]),  # Llama / Mistral
        (["encoder.block.0.layer.0.w", "encoder.block.1.layer.1.w"], "encoder.block", [0, 1]),
        (["model.layers.2.moe.layers.7.w"], "model.layers", [2]),  # the outer list wins
    ],
)  # fmt: skip
def test_find_layer_indices_on_other_namings(names, stack, indices):
    found_stack, layer_of = ft.find_layer_indices(names)
    assert found_stack == stack
    assert sorted(layer_of.values()) == indices


def test_two_layer_stacks_are_refused():
    names = ["model.encoder.layers.0.fc.weight", "model.decoder.layers.0.fc.weight"]
    with pytest.raises(ValueError, match="2 layer stacks"):
        ft.find_layer_indices(names)


def test_bad_hyperparameters_are_refused():
    model = _tiny("bert")
    with pytest.raises(ValueError, match="decay"):
        ft.layerwise_lr_param_groups(model, base_lr=BASE_LR, head_lr=HEAD_LR, decay=1.5)
    with pytest.raises(ValueError, match="learning rates"):
        ft.layerwise_lr_param_groups(model, base_lr=-1.0, head_lr=HEAD_LR, decay=DECAY)


def test_bad_finetune_config_is_refused():
    with pytest.raises(ValueError, match="batch_size"):
        ft.FineTuneConfig(batch_size=0)
    with pytest.raises(ValueError, match="epochs"):
        ft.FineTuneConfig(phase_two_epochs=-1)


def test_config_is_frozen_and_its_key_follows_every_setting():
    import dataclasses

    config = ft.FineTuneConfig()
    assert config.key() == ft.FineTuneConfig().key()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 4
    for field in dataclasses.fields(ft.FineTuneConfig):
        value = getattr(config, field.name)
        changed = dataclasses.replace(config, **{field.name: value * 2 if value else 1})
        assert changed.key() != config.key(), field.name


def _tiny_run(seed: int):
    """Both phases of the recipe on the tiny BERT with 10 random rows: (losses, model)."""
    model = _tiny("bert")
    generator = torch.Generator().manual_seed(seed)
    data = torch.Generator().manual_seed(1)
    inputs = {
        "input_ids": torch.randint(0, 50, (10, 6), generator=data),
        "attention_mask": torch.ones(10, 6, dtype=torch.int64),
    }
    labels = torch.randint(0, 3, (10,), generator=data)
    config = ft.FineTuneConfig(batch_size=4, phase_one_epochs=2, phase_two_epochs=3)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "classifier" not in n}
    one = ft.phase_one(model, inputs, labels, config, generator)
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], value) for n, value in base.items())  # base frozen
    two, groups = ft.phase_two(model, inputs, labels, config, generator)
    assert {g["name"].split("/")[0] for g in groups} >= {"head", "layer.0", "embeddings"}
    return one, two, model


def test_phases_run_a_fixed_number_of_steps_and_repeat_exactly():
    one, two, model = _tiny_run(seed=0)
    assert len(one) == 2 * 3 and len(two) == 3 * 3  # epochs x ceil(10 rows / batch 4)
    again_one, again_two, again = _tiny_run(seed=0)
    assert (one, two) == (again_one, again_two)  # deterministic given the seed
    for (_, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b)
    assert _tiny_run(seed=1)[0] != one  # the seed decides the batch order


def test_replace_head_swaps_the_final_linear():
    model = _tiny("roberta")
    new_head = ft.replace_classification_head(model, 7)
    assert model.classifier.out_proj is new_head and new_head.out_features == 7
    assert model(input_ids=torch.tensor([[3, 4, 5]])).logits.shape == (1, 7)
    with pytest.raises(ValueError, match="classification head"):
        ft.replace_classification_head(torch.nn.Linear(2, 2), 3)


# ---------------------------------------------------------------------------- real MiniLM


@pytest.fixture(scope="module")
def minilm_run():
    """Both phases on 10 BBC News articles (2 per topic), 32 tokens, full-batch steps."""
    from phase01_common.bbc_news import load_bbc_news

    data = load_bbc_news().take(train_per_label=2, dev_per_label=1)
    model, tokenizer = ft.load_minilm_classifier(data.num_labels, seed=0)
    inputs = ft.encode(tokenizer, data.train_texts, max_length=32)
    labels = torch.as_tensor(data.train_labels)
    facts = {"model": model}

    def snapshot():
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    facts["loss_start"] = ft.mean_loss(model, inputs, labels)
    start = snapshot()
    ft.set_base_trainable(model, False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    grads_seen = set()
    for _ in range(3):
        ft.train_step(model, optimizer, inputs, labels)
        grads_seen |= {n for n, p in model.named_parameters() if p.grad is not None}
    facts["phase_one_grads"] = grads_seen
    facts["phase_one_changed"] = {
        n for n, p in model.named_parameters() if not torch.equal(p, start[n])
    }
    facts["loss_after_one"] = ft.mean_loss(model, inputs, labels)

    after_one = snapshot()
    ft.set_base_trainable(model, True)
    groups = ft.layerwise_lr_param_groups(model, base_lr=2e-4, head_lr=3e-2, decay=0.8)
    optimizer = torch.optim.AdamW(groups)
    facts["optimizer_lrs"] = {g["name"]: g["lr"] for g in optimizer.param_groups}
    ft.train_step(model, optimizer, inputs, labels)
    facts["phase_two_grads"] = {n for n, p in model.named_parameters() if p.grad is not None}
    ft.train_step(model, optimizer, inputs, labels)
    facts["phase_two_changed"] = {
        n for n, p in model.named_parameters() if not torch.equal(p, after_one[n])
    }
    facts["loss_after_two"] = ft.mean_loss(model, inputs, labels)
    return facts


def test_minilm_groups_use_its_six_layers(minilm_run):
    lrs = minilm_run["optimizer_lrs"]
    assert lrs["head/decay"] == 3e-2
    for i in range(6):
        assert lrs[f"layer.{i}/decay"] == pytest.approx(2e-4 * 0.8 ** (5 - i), rel=1e-12)
        assert lrs[f"layer.{i}/no_decay"] == lrs[f"layer.{i}/decay"]
    assert lrs["embeddings/decay"] == pytest.approx(2e-4 * 0.8**6, rel=1e-12)


def test_phase_one_trains_only_the_head(minilm_run):
    head = {"classifier.weight", "classifier.bias"}
    assert minilm_run["phase_one_grads"] == head  # frozen parameters never receive a gradient
    assert minilm_run["phase_one_changed"] == head  # ... and keep their pretrained values
    assert minilm_run["loss_after_one"] < minilm_run["loss_start"] - 0.05


def test_phase_two_trains_every_parameter(minilm_run):
    every = {n for n, _ in minilm_run["model"].named_parameters()}
    assert len(every) == 105  # the checkpoint's 103 tensors + the new head's weight and bias
    assert minilm_run["phase_two_grads"] == every
    assert minilm_run["phase_two_changed"] == every
    assert minilm_run["loss_after_two"] < minilm_run["loss_after_one"] - 0.05


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
