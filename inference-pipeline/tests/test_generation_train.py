"""Training the byte-level GPT (a tiny config for a few steps), the checkpoint cache, the CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from inference_pipeline.__main__ import main
from inference_pipeline.generation.model import TINY_CONFIG, GPTConfig
from inference_pipeline.generation.train import (
    DEFAULT_STEPS,
    TrainSettings,
    checkpoint_path,
    held_out_loss,
    load_checkpoint,
    save_checkpoint,
    train,
    trained_model,
)

TEXT = b"The minister said the economy grew by two per cent last year. " * 200


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_PIPELINE_CACHE", str(tmp_path / "cache"))
    before = torch.get_num_threads()
    yield tmp_path / "cache"
    torch.set_num_threads(before)


def test_a_few_steps_of_training_learn_the_text_and_the_checkpoint_round_trips(tmp_path) -> None:
    data = np.frombuffer(TEXT, dtype=np.uint8)
    settings = TrainSettings(steps=60, batch_size=4, window=64, warmup_steps=5)
    model, summary = train(TINY_CONFIG, settings, data=(data, data), progress=lambda _: None)
    assert summary["steps"] == 60
    assert summary["held_out_loss"] < math.log(256) - 1.5  # far better than uniform over bytes
    # a step budget is deterministic: the same settings train the same weights
    again, _ = train(TINY_CONFIG, settings, data=(data, data), progress=lambda _: None)
    expected = again.state_dict()
    for name, weights in model.state_dict().items():
        torch.testing.assert_close(weights, expected[name], rtol=0, atol=0, msg=name)
    path = tmp_path / "gpt.pt"
    save_checkpoint(path, model, summary)
    loaded, loaded_summary = load_checkpoint(path)
    assert loaded.config == TINY_CONFIG and loaded_summary == summary
    assert held_out_loss(loaded, data, 64) == pytest.approx(held_out_loss(model, data, 64))


def test_checkpoint_key_covers_config_and_settings(private_cache) -> None:
    a = checkpoint_path(GPTConfig(), TrainSettings())
    assert a.parent == private_cache and a.name.startswith("gpt-")
    assert checkpoint_path(GPTConfig(), TrainSettings(steps=10)) != a
    assert checkpoint_path(GPTConfig(), TrainSettings(seconds=10)) != a
    assert checkpoint_path(GPTConfig(), TrainSettings(steps=DEFAULT_STEPS)) == a
    assert checkpoint_path(GPTConfig(n_layer=2), TrainSettings()) != a


def test_trained_model_loads_the_cached_checkpoint_instead_of_retraining(monkeypatch) -> None:
    import inference_pipeline.generation.train as train_module

    calls = []

    def fake_train(config, settings, progress=print):
        calls.append(config)
        from inference_pipeline.generation.model import GPT

        return GPT(config).eval(), {"steps": 0}

    monkeypatch.setattr(train_module, "train", fake_train)
    _, _, first = trained_model(TINY_CONFIG, TrainSettings(steps=1), progress=lambda _: None)
    _, summary, second = trained_model(TINY_CONFIG, TrainSettings(steps=1), progress=lambda _: None)
    assert first == second and first.is_file() and len(calls) == 1 and summary == {"steps": 0}


def test_a_budget_is_steps_or_seconds_never_both() -> None:
    assert TrainSettings().steps is not None and TrainSettings().seconds is None
    assert TrainSettings(seconds=5.0).steps is None
    for steps, seconds in ((10, 5.0), (0, None), (1.5, None), (None, float("nan"))):
        with pytest.raises(ValueError):
            TrainSettings(steps=steps, seconds=seconds)


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", ""],
        ["generate", "hi", "--temperature", "-1"],
        ["generate", "hi", "--max-new-tokens", "0"],
        ["train-gpt", "--seconds", "0"],
        ["train-gpt", "--steps", "0"],
        ["gate-gpt", "--prompts", "0"],
    ],
)
def test_bad_command_input_exits_2_with_one_line(argv, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
