"""TF1 Session.run against tf.function, and a SavedModel's signatures and assets."""

from __future__ import annotations

import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from graph_inspector import cli  # noqa: E402
from graph_inspector.savedmodel import describe_savedmodel  # noqa: E402
from graph_inspector_harness.tf1_concepts import (  # noqa: E402
    VOCAB,
    lookup_ids,
    save_vocab_model,
    session_vs_function,
)


def test_session_run_and_tf_function_give_the_same_outputs():
    result = session_vs_function()
    assert result.tf1_outputs.shape == result.tf2_outputs.shape == (5, 3)
    assert result.max_abs_diff <= 1e-6
    # TF1 builds variables as graph ops (VarHandleOp + initializer assigns); the FuncGraph
    # captures their handles instead, one placeholder per variable.
    assert result.tf1_ops["VarHandleOp"] == 4 and result.tf1_ops["AssignVariableOp"] == 4
    assert "VarHandleOp" not in result.tf2_ops and result.tf2_captures == 4
    for op in ("MatMul", "Relu"):
        assert result.tf1_ops[op] == result.tf2_ops[op] == (2 if op == "MatMul" else 1)


def test_savedmodel_signatures_and_asset_survive_a_move(tmp_path, capsys):
    folder = save_vocab_model(tmp_path / "vocab_model")
    moved = tmp_path / "elsewhere" / "moved_model"
    moved.parent.mkdir()
    shutil.move(str(folder), str(moved))
    assert not folder.exists()
    # The lookup table reads the asset copied into the SavedModel, wherever it now lives.
    assert lookup_ids(moved, ["graph", "asset", "nope"]) == [VOCAB.index("graph"), 6, 0]
    desc = describe_savedmodel(moved)
    assert [s.key for s in desc.signatures] == ["lookup", "score"]
    lookup = desc.signatures[0]
    assert [str(t) for t in lookup.inputs] == ["words: string[None]"]
    assert [str(t) for t in lookup.outputs] == ["ids: int64[None]"]
    assert desc.assets == ("vocab_model_vocab.txt",)
    assert cli.main(["signatures", str(moved)]) == 0
    out = capsys.readouterr().out
    assert "signature 'score'" in out and "input   ids: int64[None,None]" in out
    assert "assets (1): vocab_model_vocab.txt" in out
