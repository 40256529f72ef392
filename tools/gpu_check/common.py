"""What every step shares: its command line, its time budget, its JSON record, latency timing.

A step's record is rewritten (atomically) after every row it measures, so a step that is
stopped at its time limit still leaves every finished row behind, with ``status: running``,
which the report shows as cut short.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from phase01_common.cli import OneLineArgumentParser, OutputPathError, check_out_file
from phase01_common.stats import percentiles
from phase01_common.timing import Timings, time_interleaved

# Seconds a step keeps in hand to write its record after its last measurement.
FINISH_MARGIN_S = 5.0
# Set by gpu_check.sh: the folders it puts on PYTHONPATH (the lent machine installs nothing).
PYTHONPATH_ENV = "GPU_CHECK_PYTHONPATH"
REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class StepArgs:
    out: Path
    budget_s: float
    dry_run: bool


def parse_args(prog: str, description: str, argv: list[str] | None = None) -> StepArgs:
    parser = OneLineArgumentParser(prog=prog, description=description)
    parser.add_argument("--out", type=Path, required=True, help="the step's JSON record")
    parser.add_argument("--budget-s", type=float, required=True, help="the step's time limit")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny sizes on the CPU (what make test runs)"
    )
    args = parser.parse_args(argv)
    if args.budget_s <= 0:
        parser.error(f"--budget-s must be positive, got {args.budget_s:g}")
    try:
        check_out_file(args.out, "--out")
    except OutputPathError as exc:
        parser.error(str(exc))
    return StepArgs(args.out, args.budget_s, args.dry_run)


class Budget:
    """The step's deadline, measured from its start, less FINISH_MARGIN_S."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.deadline = self.start + max(seconds - FINISH_MARGIN_S, 0.0)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def allows(self, seconds: float) -> bool:
        return self.left() >= seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start


class StepRecord:
    """One step's JSON: ``step``, ``status``, ``dry_run``, ``environment``, ``rows``,
    ``checks`` and whatever the step sets; saved after every change."""

    def __init__(self, path: Path, step: str, args: StepArgs) -> None:
        self.path = path
        self.budget = Budget(args.budget_s)
        self.data: dict[str, Any] = {
            "step": step,
            "status": "running",
            "dry_run": args.dry_run,
            "budget_s": args.budget_s,
            "seconds": 0.0,
            "environment": environment(),
            "rows": [],
            "checks": [],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        self.save()

    def set(self, **fields: Any) -> None:
        self.data.update(fields)
        self.save()

    def add_row(self, row: dict[str, Any]) -> None:
        self.data["rows"].append(row)
        self.save()

    def add_check(self, name: str, value: float, limit: float, comparison: str) -> bool:
        """A pass/fail figure (``comparison`` is "<=" or ">="); a NaN never passes."""
        ok = value <= limit if comparison == "<=" else value >= limit
        passed = bool(ok and np.isfinite(value))
        check = {"name": name, "value": float(value), "limit": float(limit)}
        self.data["checks"].append(check | {"comparison": comparison, "passed": passed})
        self.save()
        return passed

    @property
    def checks_passed(self) -> bool:
        return all(check["passed"] for check in self.data["checks"])

    def finish(self, status: str, reason: str = "") -> None:
        self.data["status"] = status
        if reason:
            self.data["reason"] = reason
        self.save()

    def save(self) -> None:
        self.data["seconds"] = round(self.budget.elapsed(), 2)
        temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(self.data, indent=1, default=float))
        os.replace(temporary, self.path)


def environment() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


class NeedsGpu(RuntimeError):
    """A full (not dry) run found no CUDA device."""


def pick_device(dry_run: bool):
    """The CPU for a dry run; otherwise CUDA, or NeedsGpu."""
    import torch

    if dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise NeedsGpu("no CUDA device visible to torch; use --dry-run on a machine without one")
    return torch.device("cuda")


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def latency_ms(seconds: list[float]) -> dict[str, float]:
    """p50, p90 and p99 of ``seconds`` in milliseconds (``p50_ms``...), with the count."""
    return {f"{k}_ms": v for k, v in percentiles(seconds, scale=1e3).items()} | {
        "runs": len(seconds)
    }


def device_timer(device) -> Callable[[Callable[[], object]], float]:
    """A timer for ``phase01_common.timing.time_interleaved``: one call as a caller sees it,
    the device synchronized before and after (a request's answer is only there once its
    kernels have finished)."""

    def timer(call: Callable[[], object]) -> float:
        synchronize(device)
        begin = time.perf_counter()
        call()
        synchronize(device)
        return time.perf_counter() - begin

    return timer


def time_on_device(
    calls: dict[str, Callable[[], object]], device, warmup: int, rounds: int
) -> Timings:
    """Every call of ``calls`` timed in interleaved rounds (the shared loop: orders that balance
    each call's position and predecessor), each sample synchronized on ``device``."""
    return time_interleaved(calls, rounds=rounds, warmup=warmup, timer=device_timer(device))


def unreachable_packages() -> list[str] | None:
    """The project's top-level packages this process imported that the folders gpu_check.sh
    puts on PYTHONPATH would not find by themselves: on the lent machine nothing is installed,
    so each of these imports would fail there. None when not run by gpu_check.sh."""
    folders = os.environ.get(PYTHONPATH_ENV)
    if folders is None:
        return None
    environment_root = Path(sys.prefix).resolve()
    tops = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        # torch.ops and torch.classes carry a bare file name: they are not files of ours
        if name.startswith("_") or not file or not Path(file).is_absolute():
            continue
        path = Path(file).resolve()
        if path.is_relative_to(REPOSITORY) and not path.is_relative_to(environment_root):
            tops.add(name.split(".")[0])
    paths = folders.split(os.pathsep)
    return sorted(t for t in tops if importlib.machinery.PathFinder.find_spec(t, paths) is None)


def run_step(step: str, args: StepArgs, body: Callable[[StepRecord], str]) -> int:
    """Run ``body(record)``, which returns the final status ("ok", "failed: why" or
    "skipped: why").
    Exit code 0 for ok and skipped, 1 for failed; an exception is recorded in one line (and
    its traceback on stderr) rather than lost."""
    record = StepRecord(args.out, step, args)
    try:
        status = body(record)
    except NeedsGpu as exc:
        record.finish("failed", str(exc))
        print(f"gpu_check.{step}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()
        record.finish("failed", f"{type(exc).__name__}: {exc}")
        return 1
    unreachable = unreachable_packages()
    if unreachable is not None:
        record.set(packages_not_on_the_scripts_pythonpath=unreachable)
        record.add_check("packages_not_on_the_scripts_pythonpath", len(unreachable), 0, "<=")
    if status.startswith("skipped"):
        record.finish("skipped", status.removeprefix("skipped").lstrip(": "))
        return 0
    if status.startswith("failed"):
        record.finish("failed", status.removeprefix("failed").lstrip(": "))
        return 1
    if status == "ok" and not record.checks_passed:
        failed = [c["name"] for c in record.data["checks"] if not c["passed"]]
        record.finish("failed", "checks failed: " + ", ".join(failed))
        return 1
    record.finish(status)
    return 0 if status == "ok" else 1
