"""`build`: model in, validated Triton repository out. `gate`: re-check an existing repository.

Stages (each prints progress): load or fine-tune the model -> export (dynamo, TorchScript,
torch.export reference) -> fuse -> quantize / FP16 -> PyTorch reference outputs on the gate
set -> every variant through the gates -> latency -> promoted variants into
``model_repository/``, everything (failures included) into ``manifest.json``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
from phase01_common.cache import fill_once

from inference_pipeline import export, optimize, repository
from inference_pipeline.gates import (
    GATES,
    Evaluation,
    GateReport,
    GateResult,
    GateSet,
    apply_gates,
    build_gate_set,
    evaluate,
)
from inference_pipeline.model import (
    PIPELINE_TRAINING,
    FineTuneConfig,
    load_or_train,
    torch_outputs,
)
from inference_pipeline.openvino_runtime import PIN_WHEN_ALONE, bf16_unsupported_reason
from inference_pipeline.quantize import METHODS, Recipe, primary_recipes, recipe
from inference_pipeline.runtime import (
    Runner,
    backend_runner,
    interleaved_ms,
    make_session,
    session_runner,
)
from inference_pipeline.serving.backends import OpenVinoBackend, backend_spec, make_backend
from inference_pipeline.tokenization import TextTokenizer

MODEL_PREFIX = "bbc_minilm"
# The modules whose code decides what `build` writes (hashed into the build cache key).
BUILD_MODULES = (
    "export", "gates", "model", "openvino_runtime", "optimize", "pipeline", "quantize",
    "repository", "runtime", "tokenization",
)  # fmt: skip
# Promotion by measurement: every promoted variant is timed at these batch sizes, sequence
# 128, with one intra-op thread (as the bench times them), in interleaved rounds.
PROMOTION_BATCHES = (1, 8)
PROMOTION_SEQUENCE = 128
PROMOTION_THREADS = 1
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildSettings:
    train: FineTuneConfig = PIPELINE_TRAINING
    gate_dev_per_label: int = 40  # 200 held-out articles: one flipped text = 0.5 points
    ladder_per_length: int = 2
    calibration_texts: int = 32  # training articles for static INT8 calibration
    threads: int = 2
    latency_iterations: int = 20  # interleaved rounds at batch 1 (batch 8: a quarter, >= 3)
    recipes: tuple[str, ...] | None = None  # rows of quantize.RECIPES to make (None: all)


QUICK_BUILD = BuildSettings(
    train=PIPELINE_TRAINING,
    gate_dev_per_label=4,
    ladder_per_length=1,
    calibration_texts=8,
    latency_iterations=5,
)


@dataclass
class Variant:
    name: str  # model folder name, e.g. bbc_minilm_int8_dynamic
    recipe: Recipe  # its row of quantize.RECIPES
    made_by: str  # how it was made, for the manifest
    path: Path
    gates: GateReport | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)  # "batch1_p50", "batch8_p50"

    @property
    def runtime(self) -> str:
        return self.recipe.runtime

    @property
    def route(self) -> str:
        return self.recipe.route

    @property
    def precision(self) -> str:
        return self.recipe.precision

    @property
    def promoted(self) -> bool:
        return self.gates is not None and self.gates.passed


def variant_name(row: Recipe) -> str:
    return f"{MODEL_PREFIX}_{row.variant_suffix}"


@dataclass
class BuildResult:
    repository: Path
    variants: list[Variant]
    fusions: list[optimize.FusionReport]
    reference_accuracy: float
    exported_program_max_abs_diff: float
    seconds: dict[str, float]
    default_variant: dict = field(default_factory=dict)  # see :func:`promote_fastest`
    skipped: dict[str, str] = field(default_factory=dict)  # recipe name -> why not made


def _timed(seconds: dict[str, float], name: str, progress: Progress):
    class _Timer:
        def __enter__(self) -> None:
            progress(f"[{name}] ...")
            self.start = time.perf_counter()

        def __exit__(self, *exc: object) -> None:
            seconds[name] = time.perf_counter() - self.start
            if exc[0] is None:
                progress(f"[{name}] done in {seconds[name]:.1f} s")

    return _Timer()


def _make_variant(
    row: Recipe,
    classifier: torch.nn.Module,
    tokenizer: TextTokenizer,
    work: Path,
    calibration: list[str],
    made: dict[str, Path],
    fusions: list[optimize.FusionReport],
    progress: Progress,
) -> Variant:
    """The variant of one recipe row; ``made`` maps recipe names to the graphs made so far
    (a row's ``source`` is made before it: the table lists sources first)."""
    dst = work / f"{row.name}.onnx"
    made_by = row.made_by.format(calibration=len(calibration), tool="")
    if row.method == "reuse":
        dst = made[row.source]
        progress(f"  {row.name}: {made_by}")
    elif row.method == "export":
        result = export.export_onnx(classifier, row.route, export.example_inputs(tokenizer), dst)
        progress(f"  exported {row.route}: {result.node_count} nodes in {result.seconds:.1f} s")
    elif row.method == "fuse":
        fused = optimize.fuse(made[row.source], dst, row.route)
        fusions.append(fused)
        if fused.tool != optimize.ORT_TRANSFORMER_OPTIMIZER:  # the ORT optimizer's view too
            fusions.append(optimize.fuse_with_ort_optimizer(made[row.source], None, row.route))
        progress(f"  fused {row.route} with {fused.tool}: {fused.counts}")
        made_by = row.made_by.format(calibration=len(calibration), tool=fused.tool)
    else:
        METHODS[row.method](row, made[row.source], dst, tokenizer, calibration)
        progress(f"  {row.name}: {made_by}")
    export.check_io_contract(onnx.load(str(dst)), str(dst))
    made[row.name] = dst
    return Variant(variant_name(row), row, made_by, dst)


def _gate_variant(
    variant: Variant,
    tokenizer: TextTokenizer,
    gate_set: GateSet,
    reference: Evaluation,
    threads: int,
    progress: Progress,
) -> None:
    runner = variant_runner(
        variant.runtime, variant.path, threads, variant.recipe.runtime_parameters
    )
    candidate = evaluate(runner, tokenizer, gate_set)
    variant.gates = apply_gates(variant.name, variant.recipe.gates, candidate, reference, gate_set)
    if variant.promoted:
        progress(f"  PASS {variant.name}")
    for failed in variant.gates.failed:
        progress(f"  NOT PROMOTED {variant.name}: gate {failed.describe()}")


def build(
    out: Path, settings: BuildSettings = BuildSettings(), progress: Progress = print
) -> BuildResult:
    """Run every stage; write ``out/model_repository`` (and ``out/work`` for all variants)."""
    seconds: dict[str, float] = {}
    torch.set_num_threads(settings.threads)
    work, repo = out / "work", out / "model_repository"
    work.mkdir(parents=True, exist_ok=True)
    if repo.exists():
        import shutil

        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    with _timed(seconds, "model", progress):
        trained = load_or_train(settings.train, progress=progress)
        tokenizer = TextTokenizer.from_checkpoint()
    with _timed(seconds, "export, fuse, quantize", progress):
        from phase01_common.bbc_news import load_bbc_news

        train_texts = load_bbc_news(seed=settings.train.seed).train_texts
        calibration = train_texts[: settings.calibration_texts]
        classifier = trained.classifier("eager")
        made: dict[str, Path] = {}
        fusions: list[optimize.FusionReport] = []

        def make(row: Recipe) -> Variant:
            return _make_variant(
                row, classifier, tokenizer, work, calibration, made, fusions, progress
            )

        rows = primary_recipes(settings.recipes)
        skipped = {row.name: reason for row in rows if (reason := missing_capability(row))}
        for name, reason in skipped.items():
            progress(f"  skipped {name}: {reason}")
        variants = [make(row) for row in rows if row.name not in skipped]
    with _timed(seconds, "reference", progress):
        gate_set = build_gate_set(
            tokenizer, settings.gate_dev_per_label, settings.ladder_per_length, settings.train.seed
        )
        eager = trained.classifier("sdpa")
        reference = evaluate(lambda inputs: torch_outputs(eager, inputs), tokenizer, gate_set)
        program = export.export_program(
            trained.classifier("eager"), export.example_inputs(tokenizer)
        )
        # The reference graph is checked on the first batches only (it runs at eager speed).
        n = min(16, len(gate_set.texts))
        head = GateSet(gate_set.texts[:n], gate_set.labels[:n], [0, n - 1], gate_set.batch_size)
        ep_eval = evaluate(
            lambda inputs: export.exported_program_outputs(program, inputs), tokenizer, head
        )
        ep_diff = float(np.max(np.abs(ep_eval.batched[0] - reference.batched[0][:n])))
        progress(f"  torch.export reference vs eager: max abs logit diff {ep_diff:.2e}")
    with _timed(seconds, "gates", progress):
        for index, variant in enumerate(variants):
            _gate_variant(variant, tokenizer, gate_set, reference, settings.threads, progress)
            if variant.recipe.fallback and not variant.promoted:
                variants[index] = variant = make(recipe(variant.recipe.fallback))
                _gate_variant(variant, tokenizer, gate_set, reference, settings.threads, progress)
    with _timed(seconds, "latency", progress):
        default_variant = promote_fastest(variants, tokenizer, settings.latency_iterations)
        for batch, choice in default_variant.get("by_batch", {}).items():
            progress(
                f"  fastest at batch {batch}: {choice['variant']} "
                f"({choice['p50_ms']:.1f} ms p50, {PROMOTION_THREADS} thread)"
            )
    with _timed(seconds, "repository", progress):
        write_repository(
            repo,
            variants,
            fusions,
            trained.label_names,
            tokenizer,
            gate_set,
            reference,
            manifest_extra={
                "train_settings": dataclasses.asdict(settings.train),
                "train_settings_key": settings.train.key(),
                "dev_accuracy_after_training": trained.dev_accuracy.get("after"),
                "threads": settings.threads,
                "exported_program_max_abs_diff": ep_diff,
                "build_seconds": seconds,
                "default_variant": default_variant,
                "skipped_variants": skipped,
            },
        )
    return BuildResult(
        repo,
        variants,
        fusions,
        reference.accuracy(gate_set.labels),
        ep_diff,
        seconds,
        default_variant,
        skipped,
    )


def missing_capability(row: Recipe) -> str | None:
    """Why ``row`` cannot be made on this machine (None: it can)."""
    if row.needs == "bf16":
        return bf16_unsupported_reason()
    return None


def variant_runner(
    runtime: str,
    path: Path,
    threads: int,
    parameters: Mapping[str, str] | None = None,
    pinning: bool = PIN_WHEN_ALONE,
) -> Runner:
    """How build, gate and bench run a variant: ONNX Runtime through the one session factory
    with spinning on (one model runs alone), any other runtime through its serving backend
    (``serving.backends.BACKENDS``) with the config parameters it reads; OpenVINO with
    ``pinning`` (default: OpenVINO's own, as the bench's peer runs)."""
    spec = backend_spec(runtime)
    if spec.platform == repository.PLATFORM:
        return session_runner(make_session(path, threads))
    options = {"pinning": pinning} if spec.backend_class is OpenVinoBackend else None
    return backend_runner(make_backend(runtime, path, threads, parameters, options))


def probe_inputs(tokenizer: TextTokenizer, batch: int, sequence: int) -> dict[str, np.ndarray]:
    """``batch`` identical rows of exactly ``sequence`` tokens, no padding."""
    encoded = tokenizer.encode([" ".join(["news"] * (2 * sequence))])
    return {k: np.repeat(v[:, :sequence], batch, axis=0) for k, v in encoded.items()}


def promote_fastest(variants: list[Variant], tokenizer: TextTokenizer, rounds: int) -> dict:
    """Time every promoted variant timed on a CPU (each runtime its own) at each of
    :data:`PROMOTION_BATCHES` and mark the fastest median at each batch as the promoted default
    (``by_batch``) and the fastest dynamic-shape one at the last batch as ``served``.
    Sets ``variant.latency_ms``; returns the manifest's ``default_variant`` record."""
    timed = [v for v in variants if v.promoted and v.recipe.timed_on_cpu]
    if not timed:
        return {}
    runners = {
        v.name: variant_runner(v.runtime, v.path, PROMOTION_THREADS, v.recipe.runtime_parameters)
        for v in timed
    }
    by_batch = {}
    for batch in PROMOTION_BATCHES:
        inputs = probe_inputs(tokenizer, batch, PROMOTION_SEQUENCE)
        count = rounds if batch == 1 else max(3, rounds // 4)
        samples = interleaved_ms(runners, inputs, count)
        medians = {name: float(np.median(ms)) for name, ms in samples.items()}
        for variant in timed:
            variant.latency_ms[f"batch{batch}_p50"] = medians[variant.name]
        best = min(medians, key=medians.get)
        by_batch[str(batch)] = {"variant": best, "p50_ms": medians[best], "rounds": count}
    # The served default: the batch-8 winner (the server batches under load) among the
    # variants that run every input shape as compiled. A static-shape one compiles each new
    # padded shape on first use (about 0.5 s, at most 8 kept): in a server's mix of batch
    # sizes and lengths that is a stall per new shape, so it is promoted for fixed shapes only.
    last = f"batch{PROMOTION_BATCHES[-1]}_p50"
    dynamic = [v for v in timed if not v.recipe.static_shapes]
    served = min(dynamic or timed, key=lambda v: v.latency_ms[last]).name
    return {
        "by_batch": by_batch,
        "sequence": PROMOTION_SEQUENCE,
        "threads": PROMOTION_THREADS,
        "served": served,
    }


def write_repository(
    repo: Path,
    variants: list[Variant],
    fusions: list[optimize.FusionReport],
    label_names: tuple[str, ...],
    tokenizer: TextTokenizer,
    gate_set: GateSet,
    reference: Evaluation,
    manifest_extra: dict | None = None,
) -> None:
    """Model folders for the promoted variants, gate data, and the manifest of all of them."""
    gate_set.save(repo / repository.GATE_SET)
    reference.save(repo / repository.GATE_REFERENCE)
    entries = []
    for variant in variants:
        files = {}
        if variant.promoted:
            folder = repository.write_model_folder(
                repo,
                variant.name,
                variant.path,
                tokenizer,
                label_names,
                variant.runtime,
                variant.recipe.runtime_parameters,
            )
            files = {
                str(p.relative_to(repo)): repository.file_sha256(p)
                for p in sorted(folder.rglob("*"))
                if p.is_file()
            }
        entries.append(
            {
                "name": variant.name,
                "route": variant.route,
                "runtime": variant.runtime,
                "precision": variant.precision,
                "recipe": variant.recipe.name,
                "made_by": variant.made_by,
                "promoted": variant.promoted,
                "accuracy": variant.gates.accuracy if variant.gates else None,
                "gates": [dataclasses.asdict(r) for r in variant.gates.results]
                if variant.gates
                else [],
                "latency_ms_seq128_1_thread": variant.latency_ms,
                "files": files,
            }
        )
    manifest = {
        "model": "all-MiniLM-L6-v2 + BBC News topic head",
        "labels": list(label_names),
        **(manifest_extra or {}),
        "reference_accuracy": reference.accuracy(gate_set.labels),
        "thresholds": dataclasses.asdict(GATES),
        "gate_data": {
            name: repository.file_sha256(repo / name)
            for name in (repository.GATE_SET, repository.GATE_REFERENCE)
        },
        "fusions": [{"route": f.route, "tool": f.tool, "counts": f.counts} for f in fusions],
        "variants": entries,
    }
    repository.write_manifest(repo, manifest)


def build_key(settings: BuildSettings) -> str:
    """Hash of everything that determines a build's output: the settings, the source of the
    offline modules and the exporter/runtime versions (the build is deterministic given these)."""
    import hashlib
    import json

    import onnx
    import onnxruntime

    digest = hashlib.sha256(json.dumps(dataclasses.asdict(settings), sort_keys=True).encode())
    package = Path(__file__).parent
    for name in BUILD_MODULES:
        digest.update(name.encode() + (package / f"{name}.py").read_bytes())
    import openvino

    versions = (torch.__version__, onnx.__version__, onnxruntime.__version__, openvino.__version__)
    for version in versions:
        digest.update(version.encode())
    return digest.hexdigest()[:16]


def result_from_repository(repo: Path) -> BuildResult:
    """The BuildResult of an existing repository, read back from its manifest."""
    manifest = repository.read_manifest(repo)
    variants = []
    for entry in manifest["variants"]:
        gates = None
        if entry.get("gates"):
            results = [GateResult(**g) for g in entry["gates"]]
            gates = GateReport(entry["name"], results, entry["accuracy"])
        folder = repo / entry["name"]
        variant = Variant(entry["name"], manifest_recipe(entry), entry["made_by"], folder, gates)
        variant.latency_ms = entry.get("latency_ms_seq128_1_thread", {})
        variants.append(variant)
    fusions = [
        optimize.FusionReport(f["route"], f["tool"], f["counts"]) for f in manifest["fusions"]
    ]
    return BuildResult(
        repo,
        variants,
        fusions,
        manifest["reference_accuracy"],
        manifest.get("exported_program_max_abs_diff", float("nan")),
        manifest.get("build_seconds", {}),
        manifest.get("default_variant", {}),
        manifest.get("skipped_variants", {}),
    )


def build_cached(
    settings: BuildSettings = BuildSettings(),
    cache_dir: Path | None = None,
    progress: Progress = print,
) -> BuildResult:
    """``build`` once per :func:`build_key` under ``<cache>/builds/<key>/`` (only the
    repository is kept, not the intermediate variants); later calls read it back."""
    import shutil

    from inference_pipeline.model import default_cache_dir

    key = build_key(settings)
    folder = (cache_dir or default_cache_dir()) / "builds" / key

    def build_into(partial: Path) -> None:
        build(partial, settings, progress)
        shutil.rmtree(partial / "work", ignore_errors=True)  # hundreds of MB, not needed again

    # fill_once: a second process needing the same build waits, then reads it
    if fill_once(folder, f"model_repository/{repository.MANIFEST}", build_into):
        progress(f"[build] reusing the cached build {folder} (settings + code key {key})")
    return result_from_repository(folder / "model_repository")


def manifest_recipe(entry: dict) -> Recipe:
    """The recipe row a manifest entry names (RepositoryError for a recipe not in the table)."""
    try:
        return recipe(str(entry.get("recipe")))
    except KeyError as exc:
        raise repository.RepositoryError(f"manifest entry {entry.get('name')!r}: {exc}") from None


def default_models(manifest: Mapping) -> list[str]:
    """The model folders a server loads by default: the served one and each batch's fastest."""
    record = manifest.get("default_variant", {})
    names = [record["served"]] if "served" in record else []
    names += [choice["variant"] for choice in record.get("by_batch", {}).values()]
    return list(dict.fromkeys(names))


def gate_repository(
    repo: Path,
    threads: int = 2,
    progress: Progress = print,
    only: Collection[str] | None = None,
) -> list[GateReport]:
    """Re-run the gates on every promoted variant of an existing repository (or on the
    promoted ones among ``only``)."""
    repo = Path(repo)
    manifest = repository.read_manifest(repo)
    gate_data = manifest.get("gate_data", {})
    repository.verify_hashes(repo, gate_data)
    gate_set = GateSet.load(repo / repository.GATE_SET)
    reference = Evaluation.load(repo / repository.GATE_REFERENCE)
    reports = []
    for entry in manifest["variants"]:
        if only is not None and entry["name"] not in only:
            continue
        if not entry.get("promoted"):
            progress(f"  {entry['name']}: not promoted at build time, skipped")
            continue
        repository.verify_hashes(repo, entry.get("files", {}))
        folder = repository.load_model_folder(repo / entry["name"])
        parameters = {k: v.string_value for k, v in folder.config.parameters.items()}
        platform = folder.config.platform or folder.config.backend
        runner = variant_runner(platform, folder.onnx_path, threads, parameters)
        report = apply_gates(
            entry["name"],
            manifest_recipe(entry).gates,
            evaluate(runner, folder.tokenizer, gate_set),
            reference,
            gate_set,
        )
        reports.append(report)
        status = "PASS" if report.passed else "FAIL"
        progress(f"  {status} {entry['name']}")
        for failed in report.failed:
            progress(f"    gate {failed.describe()}")
    return reports
