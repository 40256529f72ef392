"""The trained checkpoint and its exported graphs, cached together outside the repository."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from phase01_common.locks import exclusive

from inference_pipeline.generation.export import ExportedFiles, export_all, signature_tag
from inference_pipeline.generation.model import GPT, GPTConfig
from inference_pipeline.generation.train import TrainSettings, trained_model


@dataclass(frozen=True)
class GeneratorArtifacts:
    model: GPT
    summary: dict[str, float]
    checkpoint: Path
    files: ExportedFiles


def load_artifacts(
    config: GPTConfig | None = None,
    settings: TrainSettings | None = None,
    progress: Callable[[str], None] = print,
) -> GeneratorArtifacts:
    """Checkpoint (training it when missing) and model.onnx / model_int8.onnx / model.pt2
    beside it, in a folder named by the graph's signature (so checkouts exporting different
    signatures from one checkpoint never read each other's graphs), exported when missing or
    older than the checkpoint."""
    model, summary, checkpoint = trained_model(config, settings, progress=progress)
    folder = checkpoint.with_name(f"{checkpoint.stem}-graph-{signature_tag(model.config)}")
    files = ExportedFiles(folder / "model.onnx", folder / "model_int8.onnx", folder / "model.pt2")
    paths = (files.onnx_fp32, files.onnx_int8, files.program)
    with exclusive(folder):
        stale = any(
            not p.is_file() or p.stat().st_mtime < checkpoint.stat().st_mtime for p in paths
        )
        if stale:
            progress(f"exporting {checkpoint.name} -> {folder}/ (ONNX fp32, INT8, torch.export)")
            files = export_all(model, folder)
    return GeneratorArtifacts(model, summary, checkpoint, files)
