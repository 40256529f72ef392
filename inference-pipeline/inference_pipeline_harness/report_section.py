"""The inference pipeline's section of `make demo`: build, gates, fusions, bench, plot.

The full section reuses the full build cached under its settings + code key
(``pipeline.build_cached``: built once, ~15 min on 2 cores, then read back), re-runs `gate` on
it and benches it with a few rounds; the quick section does the same with the quick build
(the one the test suite's ``quick_build`` fixture reads, so a test run builds it once). The
plot and the bench JSON stay in ``out_dir``. The serving and generation helpers' subsections
(``serving_bench`` / ``generation_report``), when installed, are merged into this section;
serving runs its SHORT sweep on the repository used here (the full sweep and Ray Serve are
`make bench`, i.e. `bench --serving`).
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from phase01_common.report import Check, Image, Section, Table, step

from inference_pipeline_harness.bench import COLUMNS, INT8_TARGET, SPEEDUP_TARGET, plot
from inference_pipeline_harness.demo import GATE_COLUMNS, fusion_rows, gate_rows, run

SUBSECTIONS = ("serving_bench", "generation_report")
# Subsections that run their quick (short) variant even in the full demo: their full variant
# is the benchmark that `make bench` runs.
SHORT_IN_DEMO = {"serving_bench"}


def _pipeline_checks(result, reports, bench) -> list[Check]:
    fp32 = [v for v in result.variants if v.precision == "fp32"]
    bad_fp32 = [v.name for v in fp32 if not v.promoted]
    int8 = [v for v in result.variants if v.precision == "int8"]
    in_repo = {p.name for p in result.repository.iterdir() if p.is_dir()}
    refused = {v.name for v in result.variants if not v.promoted}
    name, speedup = bench.best_speedup
    int8_name, int8_ratio = bench.int8_vs_fp32
    return [
        Check(
            "every FP32 variant matches PyTorch (<= 1e-4) alone and padded in batches",
            not bad_fp32,
            f"{len(fp32) - len(bad_fp32)}/{len(fp32)} FP32 variants pass",
            ", ".join(bad_fp32),
        ),
        Check(
            "no variant with a failing gate is in the repository",
            not (in_repo & refused),
            f"{len(in_repo)} model folders, {len(refused)} variants refused",
        ),
        Check(
            "`gate` re-run on the written repository's default models passes",
            bool(reports) and all(r.passed for r in reports),
            f"{sum(r.passed for r in reports)}/{len(reports)}",
        ),
        Check(
            "an INT8 variant passes the INT8 gates",
            any(v.promoted for v in int8),
            ", ".join(f"{v.name}: {'promoted' if v.promoted else 'refused'}" for v in int8),
        ),
        Check(
            f"best promoted variant >= {SPEEDUP_TARGET}x torch eager (batch 1, seq 128)",
            speedup >= SPEEDUP_TARGET,
            f"{speedup:.2f}x ({name}, {bench.threads} threads)",
            benchmark=True,
        ),
        Check(
            f"best INT8 >= {INT8_TARGET}x ONNX Runtime FP32 of the same export",
            bool(int8_name) and int8_ratio >= INT8_TARGET,
            f"{int8_ratio:.2f}x ({int8_name})" if int8_name else "no INT8 variant promoted",
            benchmark=True,
        ),
    ]


def _merge(section: Section, module_name: str, out_dir: Path, quick: bool, repo: Path) -> None:
    try:
        module = importlib.import_module(f"inference_pipeline_harness.{module_name}")
    except ModuleNotFoundError:
        return
    try:
        kwargs = {}
        parameters = inspect.signature(module.build_subsection).parameters
        if "repository" in parameters:
            kwargs["repository"] = repo
        if "smoke" in parameters:  # the quick demo runs the subsection's smoke variant
            kwargs["smoke"] = quick
        short = quick or module_name in SHORT_IN_DEMO
        with step(f"{module_name}{' (short)' if short else ''}"):
            sub = module.build_subsection(out_dir / module_name, short, **kwargs)
    except Exception as exc:  # a failing subsection is shown as a failure, not a crash
        section.checks.append(Check(f"{module_name} subsection runs", False, repr(exc)[:300]))
        return
    prefix = sub.title.split(":")[0]
    section.checks += [
        Check(f"{prefix}: {c.name}", c.passed, c.measured, c.detail, c.benchmark)
        for c in sub.checks
    ]
    section.tables += [Table(f"{prefix}: {t.title}", t.columns, t.rows) for t in sub.tables]
    section.images += sub.images
    section.texts += sub.texts
    section.headline += sub.headline[:1]


def build_section(out_dir: Path, quick: bool) -> Section:
    out_dir.mkdir(parents=True, exist_ok=True)
    result, bench, reports = run(None, quick)  # the cached build (settings + code key)
    png = plot(bench, out_dir / "bench_latency.png")
    int8 = [v for v in result.variants if v.precision == "int8" and v.gates]
    drops = {
        v.name: next(r.value for r in v.gates.results if r.name == "accuracy_drop_points")
        for v in int8
    }
    promoted = sum(v.promoted for v in result.variants)
    promoted_names = {v.name for v in result.variants if v.promoted}

    def short(name: str) -> str:
        return name.replace("bbc_minilm_", "")

    section = Section("Inference pipeline: export, fuse, quantize, gate, promote")
    name, speedup = bench.best_speedup
    promoted_drops = {n: d for n, d in drops.items() if n in promoted_names}
    if promoted_drops:
        name_drop = min(promoted_drops.items(), key=lambda kv: kv[1])
        int8_headline = f"{name_drop[1]:.2f} points, {short(name_drop[0])} (limit 0.5)"
    else:  # say so instead of quoting a refused variant's figure
        int8_headline = "no INT8 variant promoted: " + "; ".join(
            f"{short(v.name)} {v.gates.failed[0].describe()}" for v in int8 if v.gates.failed
        )
    section.headline = [
        ("best speedup vs torch eager (batch 1, seq 128)",
         f"{speedup:.2f}x, {short(name)} (intra-op threads: {bench.threads})"),
        ("INT8 held-out accuracy drop", int8_headline),
        ("variants passing every gate", f"{promoted}/{len(result.variants)} promoted"),
    ]  # fmt: skip
    section.checks = _pipeline_checks(result, reports, bench)
    section.tables = [
        Table("Gates per variant (limits: inference_pipeline.gates.GATES)", GATE_COLUMNS,
              gate_rows(result)),
        Table("Fusions per export route", ["route", "tool", "fusions (count)"],
              fusion_rows(result)),
        Table(f"Latency and throughput, {bench.threads} threads, shared machine", COLUMNS,
              bench.rows()),
    ]  # fmt: skip
    section.images = [Image(png, "p50/p99 latency at batch 1 and throughput at batch 8")]
    section.texts = [
        (
            "model",
            f"PyTorch FP32 held-out accuracy {result.reference_accuracy:.3f} "
            f"({'quick: briefly fine-tuned model' if quick else 'fine-tuned model'}); torch.export "
            f"reference vs eager: max abs logit diff "
            f"{result.exported_program_max_abs_diff:.1e}",
        )
    ]
    for module_name in SUBSECTIONS:
        _merge(section, module_name, out_dir, quick, result.repository)
    return section
