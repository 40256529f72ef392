"""`make demo`: run every lab's main job and write one report.

Each lab contributes a section through
``<package>_harness.report_section.build_section(out_dir, quick)`` (the types are in
``phase01_common.report``). This driver runs them in order, shows progress,
renders ``report/index.html`` and ``report/summary.md``, and exits non-zero if any check failed,
so a failure shows in the report and in the exit status instead of disappearing.

    python tools/run_demo.py [--quick] [--out report] [--only minigrad,warp_softmax,...]
"""

from __future__ import annotations

import importlib
import logging
import os
import platform
import shutil
import sys
import time
import traceback
import warnings
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on the project's machines

from phase01_common.cli import OneLineArgumentParser, OutputPathError, prepare_out_dir  # noqa: E402
from phase01_common.render import render_html, render_markdown  # noqa: E402
from phase01_common.report import Check, Section, count_checks, nan_table_checks  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table as RichTable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# (key, title, module): every package is installed editable, so each harness imports directly.
SECTIONS: list[tuple[str, str, str]] = [
    (
        "minigrad",
        "Lab 01 — minigrad: reverse-mode autodiff on NumPy",
        "minigrad_harness.report_section",
    ),
    (
        "warp_softmax",
        "Lab 02 — warp_softmax: a custom C++ softmax operator",
        "warp_softmax_harness.report_section",
    ),
    (
        "graph_inspector",
        "Lab 03 — graph_inspector: tf.function, retracing, TFLite",
        "graph_inspector_harness.report_section",
    ),
    (
        "concepts",
        "The spec's PyTorch concepts: torch.compile backend, FX, precision, memory",
        "concepts_harness.report_section",
    ),
    (
        "fundamentals",
        "Framework fundamentals: practice questions as running code",
        "fundamentals_harness.report_section",
    ),
    (
        "inference_pipeline",
        "Inference pipeline: export, fuse, quantize, gate, serve",
        "inference_pipeline_harness.report_section",
    ),
]


def _inside(path: Path, folder: Path) -> bool:
    return path.is_relative_to(folder)


def localise_images(section: Section, report_dir: Path, out_dir: Path) -> None:
    """Copy every image that resolves outside the report folder into ``out_dir``.

    The report must be self-contained: an image elsewhere on disk (or a link in the report
    folder that points elsewhere) would break once the folder is moved, so its file is copied
    in and the section points at the copy. A missing image is left for the existence check.
    """
    report_dir = report_dir.resolve()
    for img in section.images:
        path = Path(img.path)
        if not path.is_file() or _inside(path.resolve(), report_dir):
            continue
        source = path.resolve()
        if path.is_symlink() and _inside(path.absolute().parent.resolve(), report_dir):
            path.unlink()  # a link inside the report: replace it with the file it points at
            dest = path.absolute()
        else:
            dest = out_dir / path.name
            n = 1
            while dest.exists():
                dest = out_dir / f"{path.stem}-{n}{path.suffix}"
                n += 1
        shutil.copyfile(source, dest)
        img.path = dest


# Third-party lines that are noise on the demo's console, dropped once here for the whole run
# (each names a deliberate or harmless event): (logger, text the message contains).
NOISE: tuple[tuple[str | None, str], ...] = (
    # lab 03 retraces on purpose; its monitor explains every trace in the report
    ("tensorflow", "triggered tf.function retracing"),
    # a SavedModel with a lookup table: its initializer is restored from the asset, not traced
    ("tensorflow", "table_initializer"),
    ("absl", "table_initializer"),
    # the INT8 recipes quantize graphs the build has already optimized
    (None, "Please consider to run pre-processing before quantization"),
)


class DropNoise(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def drop_third_party_noise() -> None:
    """Install the NOISE filters, and ignore copyreg's FutureWarning (pickling a deprecated
    NumPy alias inside a library: nothing the demo can act on) and the fork warning NNCF's
    calibration raises once lab 01 has started JAX's threads in this process (the child runs
    no JAX code)."""
    for logger, text in NOISE:
        logging.getLogger(logger).addFilter(DropNoise(text))
    warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)


# What `make demo` costs on the 2-core machine (README: "How long it takes"): minutes with
# every cache warm, and what a first run adds for each model it trains and caches.
WARM_MINUTES = 3
FIRST_RUN_MINUTES = {"build": 4, "gpt": 3}


def cache_plan(keys: list[str], quick: bool) -> str:
    """One line for the start of the run: how long it will take and what it caches."""
    if quick or "inference_pipeline" not in keys:
        return ""
    from inference_pipeline.generation.model import GPTConfig
    from inference_pipeline.generation.train import checkpoint_path
    from inference_pipeline.model import default_cache_dir
    from inference_pipeline.pipeline import BuildSettings, build_key
    from inference_pipeline_harness.generation_bench import DEMO_TRAINING

    cache = default_cache_dir()
    gpt = DEMO_TRAINING
    missing = {
        "build": not (cache / "builds" / build_key(BuildSettings())).is_dir(),
        "gpt": not checkpoint_path(GPTConfig(), gpt).is_file(),
    }
    names = {
        "build": "the MiniLM fine-tune and full build,",
        "gpt": f"the byte-level GPT, {gpt.describe()},",
    }
    todo = [f"{names[k]} about {FIRST_RUN_MINUTES[k]} min" for k, v in missing.items() if v]
    minutes = WARM_MINUTES + sum(FIRST_RUN_MINUTES[k] for k, v in missing.items() if v)
    if not todo:
        return f"About {minutes} minutes: every model is cached under {cache}."
    return (
        f"About {minutes} minutes on 2 cores: this first run trains and caches under {cache} "
        f"{' and '.join(todo)}; later runs reuse them (about {WARM_MINUTES} min)."
    )


def _failed_section(title: str, exc: BaseException) -> Section:
    last = traceback.format_exception_only(exc)[-1].strip()
    section = Section(title=title, checks=[Check("section ran to completion", False, last)])
    section.texts.append(("traceback", "".join(traceback.format_exception(exc))))
    return section


def run_section(title: str, module: str, out_dir: Path, quick: bool) -> Section:
    """Run one lab; any failure becomes a failed check with its cause, never a missing section.

    "Any" includes ``SystemExit`` and other ``BaseException`` subclasses (only Ctrl-C stops
    the run), a builder that returns something other than a :class:`Section`, and a section the
    renderers cannot draw: each is tried here so one lab cannot lose the others' report.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    report_dir = out_dir.parent
    start = time.perf_counter()
    try:
        section = importlib.import_module(module).build_section(out_dir, quick)
        if not isinstance(section, Section):
            raise TypeError(f"build_section returned {type(section).__name__}, not a Section")
        section.title = title
        localise_images(section, report_dir, out_dir)
        section.checks.extend(nan_table_checks(section))
        for img in section.images:
            for path in (img.path, img.link) if img.link else (img.path,):
                if not Path(path).is_file():
                    section.checks.append(
                        Check(f"image exists: {Path(path).name}", False, "missing")
                    )
        render_html([section], report_dir, title, "")  # it must render: fail here, not later
        render_markdown([section], report_dir, title, "")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the report must show the failure, not lose the section
        section = _failed_section(title, exc)
    section.seconds = time.perf_counter() - start
    return section


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (user + system): beside the wall
    time, what a section cost on a shared machine, where the wall time also counts the load."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def reproduce_commands(key: str, quick: bool) -> list[str]:
    """Commands that rerun one section: alone in the report driver, and as its lab's demo."""
    flag = " --quick" if quick else ""
    return [
        f".venv/bin/python tools/run_demo.py{flag} --only {key}",
        f".venv/bin/python -m {key} demo{flag}",
    ]


def parse_only(only: str) -> list[str]:
    """The section keys named by ``--only`` (spaces around keys ignored); raises on unknown."""
    keys = [k.strip() for k in only.split(",") if k.strip()]
    valid = [s[0] for s in SECTIONS]
    unknown = [k for k in keys if k not in valid]
    if unknown or (only.strip() and not keys):
        named = ", ".join(unknown) if unknown else repr(only)
        raise ValueError(f"--only: unknown section key(s) {named}; valid keys: {', '.join(valid)}")
    return keys


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="tools/run_demo.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the fast variant of every lab")
    parser.add_argument("--out", type=Path, default=ROOT / "report", help="report folder")
    parser.add_argument("--only", default="", help="comma-separated section keys to run")
    args = parser.parse_args(argv)

    try:
        only = parse_only(args.only)
    except ValueError as exc:  # before anything runs: a typo must not skip a lab silently
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    try:
        report_dir = prepare_out_dir(args.out).resolve()
    except OutputPathError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    console = Console()
    chosen = [s for s in SECTIONS if not only or s[0] in only]
    drop_third_party_noise()
    plan = cache_plan([key for key, _, _ in chosen], args.quick)
    if plan:
        console.print(plan, soft_wrap=True)

    sections: list[Section] = []
    started = time.perf_counter()
    for i, (key, title, module) in enumerate(chosen, 1):
        console.rule(f"[bold]{i}/{len(chosen)}  {title}")
        cpu = cpu_seconds()
        s = run_section(title, module, report_dir / key, args.quick)
        cpu = cpu_seconds() - cpu
        s.reproduce = reproduce_commands(key, args.quick)
        sections.append(s)
        colour = "green" if s.passed else "red"
        missed = [c.name for c in s.checks if c.benchmark and not c.passed]
        console.print(f"[{colour}]{key}: {count_checks([s])} ({s.seconds:.0f} s, {cpu:.0f} CPU-s)")
        if missed:
            console.print(f"[yellow]benchmark targets missed (not failures): {'; '.join(missed)}")

    console.print(
        f"{time.perf_counter() - started:.0f} s, {cpu_seconds():.0f} CPU-s in all, load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}",
        soft_wrap=True,
    )
    meta = (
        f"{'quick' if args.quick else 'full'} run, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()} ({platform.machine()}, {platform.python_version()}), "
        f"{time.perf_counter() - started:.0f} s"
    )
    title = "Phase 01 — framework internals: demo report"
    again = "`make demo`" if not args.quick else "`.venv/bin/python tools/run_demo.py --quick`"
    page = render_html(sections, report_dir, title, meta, reproduce=again)
    (report_dir / "index.html").write_text(page)
    summary = render_markdown(sections, report_dir, title, meta, reproduce=again)
    (report_dir / "summary.md").write_text(summary)

    table = RichTable(title="Demo summary")
    for col in ("section", "checks", "failed", "benchmark targets missed"):
        table.add_column(col)
    for (key, _, _), s in zip(chosen, sections, strict=True):  # keys: the table stays narrow
        failed = [c.name for c in s.checks if not c.passed and not c.benchmark]
        missed = [c.name for c in s.checks if not c.passed and c.benchmark]
        table.add_row(
            key, str(count_checks([s]).checks), "; ".join(failed) or "—", "; ".join(missed) or "—"
        )
    console.print(table)
    console.print(str(count_checks(sections)), soft_wrap=True)  # the same words as the report's
    console.print(f"Report: {report_dir / 'index.html'} (and summary.md)", soft_wrap=True)
    return 0 if all(s.passed for s in sections) else 1


if __name__ == "__main__":
    sys.exit(main())
