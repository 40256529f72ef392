"""The GPU check's report: every step's results joined into one JSON and one markdown file,
and the summary line.

``python -m gpu_check.report --work DIR --out DIR --budget-s N --seconds N [--dry-run]``

``--work`` is the run's working folder: ``steps.tsv`` (the shell's view of each step: name,
status, seconds, limit), ``lab02/summary.tsv`` and ``lab02/bench.json`` (lab 02's script) and
``<step>.json`` (each Python step's record). ``--dry-run`` marks the report as a dry run's and
also verifies that every step ran and wrote what the report needs, exiting 1 with what is
missing.

Standard library only: the report must run even where a step's imports failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

STEPS = ("lab02", "classifier", "batching", "generation")
PYTHON_STEPS = STEPS[1:]
NOT_RUN = "not yet run on a GPU"
# The exit code when the report was written but a step is not ok (any other non-zero code
# means the report itself failed, and gpu_check.sh prints its own summary instead).
STEPS_NOT_OK = 4


def read_tsv(path: Path) -> list[list[str]]:
    if not path.is_file():
        return []
    return [line.split("\t") for line in path.read_text().splitlines() if line.strip()]


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def final_status(shell: str | None, record: dict[str, Any] | None) -> str:
    """One status per step from what the shell saw and what the step recorded."""
    if shell is None:
        return "not reached"
    recorded = (record or {}).get("status")
    reason = (record or {}).get("reason", "")
    if recorded == "skipped":
        return f"skipped: {reason}"
    if shell == "ok":
        return "ok" if recorded in (None, "ok") else f"failed: {reason or recorded}"
    if shell == "timed out":
        return "timed out (rows so far kept)" if record and record.get("rows") else "timed out"
    if shell.startswith("skipped"):
        return shell
    return f"{shell}: {reason}" if reason else shell


def lab02_record(work: Path) -> dict[str, Any]:
    parts = [
        {"name": name, "status": status, "seconds": int(seconds)}
        for name, status, seconds in read_tsv(work / "lab02" / "summary.tsv")
    ]
    bench = read_json(work / "lab02" / "bench.json") or {}
    record: dict[str, Any] = {"parts": parts}
    for key in ("cuda_summary", "casts_summary"):
        if key in bench:
            record[key] = bench[key]
    # A part the dry run leaves out is expected; any other part that is not ok is named.
    failed = [
        f"{p['name']} ({p['status']})"
        for p in parts
        if p["status"] != "ok" and not p["status"].startswith("skipped: dry run")
    ]
    if failed:
        record["status"], record["reason"] = "failed", "; ".join(failed)
    return record


def collect(work: Path) -> list[dict[str, Any]]:
    shell = {row[0]: row for row in read_tsv(work / "steps.tsv")}
    entries = []
    for name in STEPS:
        record = lab02_record(work) if name == "lab02" else read_json(work / f"{name}.json")
        row = shell.get(name)
        entry: dict[str, Any] = {
            "step": name,
            "status": final_status(row[1] if row else None, record),
            "seconds": float(row[2]) if row else 0.0,
            "limit_s": float(row[3]) if row else 0.0,
        }
        entry["record"] = record or {}
        entries.append(entry)
    return entries


def summary_line(entries: list[dict[str, Any]], seconds: float, budget_s: float) -> str:
    parts = [f"{e['step']} {e['status']} ({e['seconds']:.0f} s)" for e in entries]
    return f"gpu_check summary: {'; '.join(parts)}; {seconds:.0f} s of {budget_s:.0f} s"


# ---- markdown --------------------------------------------------------------------------------
def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        tiny_or_huge = value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e4)
        return f"{value:.{digits}g}" if tiny_or_huge else f"{value:.{digits}f}"
    return str(value)


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return lines + [""]


GATE_WORDS = {True: "passed", False: "FAILED", None: "reference"}


def lab02_markdown(record: dict[str, Any]) -> list[str]:
    lines = table(
        ["part", "status", "s"], [[p["name"], p["status"], p["seconds"]] for p in record["parts"]]
    )
    cuda = record.get("cuda_summary")
    if cuda:
        lines += [
            f"CUDA benchmark on {cuda['device']}: copy bandwidth {cuda['copy_bandwidth_gbps']:.0f}"
            f" GB/s; forward at n ≥ 4096: at least {cuda['min_speedup_forward_n_ge_4096']:.2f}×"
            " F.softmax, at least "
            f"{100 * cuda['min_fraction_of_copy_bandwidth_forward_n_ge_4096']:.0f}% of copy"
            " bandwidth (targets: 1.1×, 80%).",
            "",
        ]
    return lines


def classifier_markdown(record: dict[str, Any]) -> list[str]:
    lines = []
    tune = record.get("fine_tune")
    if tune:
        lines += [
            f"Fine-tuned {tune['steps']} steps in {tune['seconds']:.1f} s (loss "
            f"{tune['first_loss']:.3f} → {tune['last_loss']:.3f}); held-out accuracy "
            f"{100 * tune['heldout_accuracy']:.1f}% (FP32, the gates' reference).",
            "",
        ]
    done = [r for r in record.get("rows", []) if r.get("status") == "ok"]
    lines += table(
        ["variant", "batch", "p50 ms", "p90 ms", "p99 ms", "ms/row", "× FP32 eager", "gates",
         "max logit diff", "backend"],
        [[r["name"], r["batch"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["ms_per_row"],
          r["speedup_vs_fp32_eager"], GATE_WORDS[r.get("gates_passed")],
          r.get("max_abs_logit_diff", "—"), r["backend"]] for r in done],
    )  # fmt: skip
    skipped = [r for r in record.get("rows", []) if r.get("status") == "skipped"]
    lines += [f"- {r['name']}: skipped ({r['reason']})" for r in skipped]
    return lines + ([""] if skipped else [])


def batching_markdown(record: dict[str, Any]) -> list[str]:
    rows = [r for r in record.get("rows", []) if "throughput_rps" in r]
    lines = table(
        ["c", "config", "req/s", "p50 ms", "p90 ms", "p99 ms", "mean batch", "model ms/batch"],
        [[r["concurrency"], r["config"], r["throughput_rps"], r["p50_ms"], r["p90_ms"],
          r["p99_ms"], r["avg_batch"], r["compute_ms_per_batch"]] for r in rows],
    )  # fmt: skip
    ratios = record.get("throughput_ratio_batched_vs_unbatched") or {}
    if ratios:
        text = ", ".join(f"c={c}: {ratio:.2f}×" for c, ratio in ratios.items())
        lines += [f"Throughput, batched vs unbatched: {text}.", ""]
    model = record.get("model_time")
    if model:
        lines += [
            f"The model alone, interleaved: batch 1 p50 {model['batch_1_p50_ms']:.3f} ms, "
            f"batch 8 p50 {model['batch_8_p50_ms']:.3f} ms "
            f"({model['batch_8_cost_vs_batch_1']:.2f}× the time for 8× the rows).",
            "",
        ]
    return lines


def generation_markdown(record: dict[str, Any]) -> list[str]:
    rows = record.get("rows", [])
    lines = table(
        ["engine", "c", "requests", "tokens/s", "TTFT p50 ms", "ITL p50 ms", "ITL p90 ms",
         "ITL p99 ms"],
        [[r["engine"], r["concurrency"], r["requests"], r["tokens_per_s"], r["ttft_p50_ms"],
          r["itl_p50_ms"], r["itl_p90_ms"], r["itl_p99_ms"]] for r in rows],
    )  # fmt: skip
    verdict = record.get("verdict")
    if verdict:
        lines += [
            f"Continuous vs static at c={verdict['concurrency']}: "
            f"{verdict['tokens_per_s_speedup']:.2f}× the tokens/s, p99 ITL "
            f"{verdict['itl_p99_ratio']:.2f}× (target ≥ 2× at an equal or lower p99 ITL: "
            f"{'met' if verdict['target_met'] else 'missed'}).",
            "",
        ]
    return lines


SECTIONS = {
    "lab02": ("Lab 02: warp_softmax on CUDA", lab02_markdown),
    "classifier": ("The classifier on CUDA (MiniLM-L6, sequence 128)", classifier_markdown),
    "batching": ("The dynamic batcher in front of the CUDA model", batching_markdown),
    "generation": ("Continuous vs static batching, CUDA FP16 step", generation_markdown),
}


def markdown(report: dict[str, Any]) -> str:
    run = report["run"]
    lines = ["# GPU check", ""]
    if run["dry_run"]:
        lines += [
            f"**Dry run** (tiny sizes on the CPU, {NOT_RUN}): these figures only show that the "
            "code runs; they measure nothing.",
            "",
        ]
    env = run.get("environment") or {}
    lines += [
        f"{run['seconds']:.0f} s of a {run['budget_s']:.0f} s budget; "
        + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
    ]
    for entry in report["steps"]:
        title, render = SECTIONS[entry["step"]]
        lines += [f"## {title}", "", f"Status: {entry['status']} ({entry['seconds']:.0f} s)", ""]
        record = entry["record"]
        try:
            lines += render(record) if record else []
        except (KeyError, TypeError) as exc:  # a partial record: say so, keep the rest
            lines += [f"(record incomplete: {type(exc).__name__} {exc})", ""]
        failed = [c for c in record.get("checks", []) if not c["passed"]]
        checks = record.get("checks", [])
        if checks:
            lines += [f"Checks: {len(checks) - len(failed)} of {len(checks)} passed."]
            lines += [
                f"- FAILED {c['name']} = {fmt(c['value'])} (limit {c['comparison']} "
                f"{fmt(c['limit'])})"
                for c in failed
            ]
            lines += [""]
    lines += [report["summary"], ""]
    return "\n".join(lines)


# ---- the dry run's check ---------------------------------------------------------------------
def problems(report: dict[str, Any]) -> list[str]:
    """What a dry run must have produced: every step ok, with the rows the report shows."""
    found = []
    by_step = {entry["step"]: entry for entry in report["steps"]}
    for name in STEPS:
        entry = by_step.get(name)
        if entry is None or entry["status"] != "ok":
            found.append(f"{name}: status {entry['status'] if entry else 'missing'}")
            continue
        record = entry["record"]
        if name in PYTHON_STEPS and not record.get("dry_run"):
            found.append(f"{name}: its record does not say dry_run")
        if any(not c["passed"] for c in record.get("checks", [])):
            found.append(f"{name}: a check failed")
    classifier = by_step["classifier"]["record"]
    timed = {(r["dtype"], r["batch"]) for r in classifier.get("rows", []) if "p99_ms" in r}
    for dtype in ("fp32", "fp16", "bf16"):
        for batch in (1, 8):
            if (dtype, batch) not in timed:
                found.append(f"classifier: no timed row for {dtype} at batch {batch}")
    if not any(r.get("compile_mode") and "p99_ms" in r for r in classifier.get("rows", [])):
        found.append("classifier: no compiled variant ran")
    batching = by_step["batching"]["record"]
    levels = {
        (r["config"], r["concurrency"]) for r in batching.get("rows", []) if "throughput_rps" in r
    }
    for config in ("batched", "unbatched"):
        for concurrency in (1, 4, 16):
            if (config, concurrency) not in levels:
                found.append(f"batching: no {config} level at c={concurrency}")
    engines = {r.get("engine") for r in by_step["generation"]["record"].get("rows", [])}
    if engines != {"static", "continuous"}:
        found.append(f"generation: engines {sorted(map(str, engines))}, not static and continuous")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_check.report", description=__doc__)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument(
        "--dry-run", action="store_true", help="a dry run's report: also check it is complete"
    )
    args = parser.parse_args(argv)
    if not args.work.is_dir():
        parser.error(f"--work {args.work}: no such folder")
    entries = collect(args.work)
    records = [e["record"] for e in entries if e["record"].get("environment")]
    line = summary_line(entries, args.seconds, args.budget_s)
    report = {
        "run": {
            "dry_run": args.dry_run,
            "budget_s": args.budget_s,
            "seconds": args.seconds,
            "environment": records[0]["environment"] if records else {},
        },
        "steps": entries,
        "summary": line,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    (args.out / "gpu_check.md").write_text(markdown(report))
    found = problems(report) if args.dry_run else []
    for problem in found:
        print(f"gpu_check dry run: {problem}")
    print(line + (" — dry run check FAILED" if found else ""))
    ok = all(e["status"] == "ok" or e["status"].startswith("skipped") for e in entries)
    return STEPS_NOT_OK if found or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
