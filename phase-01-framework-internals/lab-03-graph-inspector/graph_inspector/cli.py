"""The command line: ``python -m graph_inspector {inspect,convert,signatures,demo,bench}``.

This module holds the parser (every command, so ``--help`` lists them all) and the library
commands; ``demo`` and ``bench`` are run by :mod:`graph_inspector.__main__`, which imports the
harness package lazily (no library module imports it).

Every failure the user can cause (bad arguments, bad path, a folder that is not a SavedModel,
an output path that cannot be written, a graph the converter cannot handle) ends in one line on
stderr, ``graph_inspector: error: ...``, and a non-zero exit status (2 for usage errors) — never
a traceback or a usage block. Set ``GRAPH_INSPECTOR_DEBUG=1`` to get the traceback. Input and
output path checks run before TensorFlow is imported and before any work, so they answer in
well under a second.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phase01_common.cli import (
    OneLineArgumentParser,
    OutputPathError,
    check_out_file,
    positive_int,
    prepare_out_dir,
)

from graph_inspector.cli_checks import (
    EXIT_FAILED,
    EXIT_USAGE,
    CliError,
    checked_savedmodel,
    import_tensorflow_quietly,
    tensorboard_command,
)
from graph_inspector.errors import NotASavedModelError, UnknownSignatureError
from graph_inspector.quiet import CapturedLog, native_stderr_captured

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "CliError",
    "build_parser",
    "import_tensorflow_quietly",
    "main",
]


class _Parser(OneLineArgumentParser):
    """The shared one-line parser, every error under the program's one name (subparsers
    inherit the class, so ``inspect``'s errors read ``graph_inspector: error: ...`` too)."""

    error_name = "graph_inspector"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m graph_inspector",
        description="See inside tf.function graphs, explain retracing, convert to TFLite.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    p = sub.add_parser("inspect", help="per-signature graph summary of a SavedModel")
    p.add_argument("savedmodel_dir", help="folder written by tf.saved_model.save")
    p.add_argument("--json", metavar="FILE", help="write {signature: report} as JSON")
    p.add_argument("--dot", metavar="FILE", help="write Graphviz DOT (and SVG where dot exists)")
    p.add_argument("--tensorboard", metavar="DIR", help="write each graph as a TensorBoard log")
    p.add_argument("--xla", action="store_true", help="XLA compile time and HLO op counts")
    p.add_argument(
        "--mlir",
        action="store_true",
        help="MLIR op counts at each lowering stage (TF -> StableHLO)",
    )
    p.add_argument("--mlir-dump", metavar="DIR", help="with --mlir: write each stage's MLIR here")
    p.add_argument("--signature", help="only this signature key (default: all)")
    p.add_argument("--no-expand", action="store_true", help="keep function calls as one node")
    p.add_argument(
        "--unknown-dim",
        type=positive_int,
        metavar="N",
        help="size of unknown (None) dimensions, such as a serving batch, for the cost "
        "estimate and --xla (default: not costed; XLA uses 1)",
    )

    p = sub.add_parser("convert", help="float32 + dynamic-range TFLite, validated")
    p.add_argument("savedmodel_dir")
    p.add_argument("--out", metavar="DIR", help="output folder (default: <savedmodel_dir>_tflite)")
    p.add_argument("--signature", default="serving_default", help="signature key to convert")

    p = sub.add_parser(
        "signatures", help="every signature's inputs and outputs, and the assets carried"
    )
    p.add_argument("savedmodel_dir")

    p = sub.add_parser(
        "profile", help="TF Profiler per op type, joined with the cost model, on a roofline"
    )
    p.add_argument("savedmodel_dir")
    p.add_argument("--signature", default="serving_default", help="signature key")
    p.add_argument("--steps", type=positive_int, default=20, help="profiled calls")
    p.add_argument(
        "--unknown-dim", type=positive_int, default=1, metavar="N", help="size of None dims"
    )
    p.add_argument(
        "--logdir", metavar="DIR", default="graph_inspector_profile", help="trace folder"
    )

    p = sub.add_parser(
        "quant-debug", help="int8 layer by layer: which layer breaks, and keeping it in float"
    )
    p.add_argument("savedmodel_dir")
    p.add_argument("--signature", default="serving_default", help="signature key")
    p.add_argument(
        "--samples", type=positive_int, default=100, help="calibration samples (random inputs)"
    )
    p.add_argument(
        "--deny",
        type=positive_int,
        default=1,
        metavar="K",
        help="keep the K worst layers and the layers reading them in float",
    )

    p = sub.add_parser("demo", help="the lab's main job: graph report, retracing, BERT to TFLite")
    p.add_argument("--quick", action="store_true", help="the fast variant (shorter training)")
    p.add_argument("--out", metavar="DIR", default="graph_inspector_demo", help="output folder")

    p = sub.add_parser("bench", help="what a retrace costs on BERT-tiny (about 10-20 s)")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed repetitions per median")
    return parser


Handler = Callable[[argparse.Namespace], int]


def main(argv: list[str] | None = None, harness: dict[str, Handler] | None = None) -> int:
    """Run one command. ``harness`` supplies the ``demo`` and ``bench`` handlers (given by
    ``python -m graph_inspector``; without them those commands say how to run them)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handlers: dict[str, Handler] = {
        "inspect": cmd_inspect,
        "convert": cmd_convert,
        "signatures": cmd_signatures,
        "quant-debug": cmd_quant_debug,
        "profile": cmd_profile,
        **(harness or {}),
    }
    try:
        handler = handlers.get(args.command)
        if handler is None:
            raise CliError(f"run `python -m graph_inspector {args.command}` for this command")
        return handler(args)
    except CliError as exc:
        return _fail(str(exc), exc.exit_code)
    except OutputPathError as exc:  # an output path checked before the work: bad input
        return _fail(str(exc), EXIT_USAGE)
    except UnknownSignatureError as exc:  # every command's --signature: bad input
        return _fail(str(exc), EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 - the contract: one line, never a traceback
        if os.environ.get("GRAPH_INSPECTOR_DEBUG"):
            raise
        kind = _error_kind(exc)
        return _fail(f"{kind}{_one_line(exc)}", EXIT_FAILED)


def _fail(message: str, code: int) -> int:
    print(f"graph_inspector: error: {message}", file=sys.stderr)
    return code


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:500] if text else type(exc).__name__


def _error_kind(exc: BaseException) -> str:
    name = type(exc).__name__
    return "" if name in ("ConversionError", "NotASavedModelError") else f"{name}: "


def cmd_inspect(args: argparse.Namespace) -> int:
    if args.json:
        check_out_file(args.json, "--json")
    if args.dot:
        check_out_file(args.dot, "--dot")
    if args.tensorboard:
        prepare_out_dir(args.tensorboard, "--tensorboard", create=False)
    if args.mlir_dump:
        if not args.mlir:
            raise CliError("--mlir-dump needs --mlir")
        prepare_out_dir(args.mlir_dump, "--mlir-dump", create=False)
    folder = checked_savedmodel(args.savedmodel_dir)
    if args.mlir_dump:
        Path(args.mlir_dump).mkdir(parents=True, exist_ok=True)
    from graph_inspector.inspect_graph import inspect_savedmodel

    try:
        reports = inspect_savedmodel(
            folder, expand_calls=not args.no_expand, unknown_dim=args.unknown_dim
        )
    except NotASavedModelError as exc:
        raise CliError(str(exc)) from exc
    if args.signature:
        if args.signature not in reports:
            raise CliError(
                f"no signature {args.signature!r} in {folder}; it has: {', '.join(reports)}"
            )
        reports = {args.signature: reports[args.signature]}
    for key, report in reports.items():
        print(f"== signature {key!r}")
        print(report.summary())
        dynamic = [n for n in report.uncostable if "dynamic shape" in (n.uncostable_reason or "")]
        if dynamic:
            print(
                f"  {len(dynamic)} node(s) have unknown dimensions: pass --unknown-dim N "
                "(a serving batch size, say) to cost them"
            )
        if args.xla:
            _print_xla(report, args.unknown_dim or 1)
        if args.mlir:
            _print_mlir(report, key, args.mlir_dump)
        print()
    _write_inspect_outputs(args, reports)
    return 0


def _write_inspect_outputs(args: argparse.Namespace, reports: dict[str, Any]) -> None:
    import json
    import shutil
    import subprocess

    from graph_inspector.render import to_dot, write_tensorboard

    if args.json:
        payload = {key: r.to_dict() for key, r in reports.items()}
        Path(args.json).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    if args.tensorboard:
        for key, report in reports.items():
            logdir = write_tensorboard(report, Path(args.tensorboard) / key)
            print(f"wrote TensorBoard log {logdir}")
        print(f"view it: {tensorboard_command()} --logdir {args.tensorboard}")
    if args.dot:
        for key, report in reports.items():
            target = Path(args.dot)
            if len(reports) > 1:
                target = target.with_name(f"{target.stem}_{key}{target.suffix or '.dot'}")
            target.write_text(to_dot(report))
            print(f"wrote {target}")
            if shutil.which("dot"):
                svg = target.with_suffix(".svg")
                subprocess.run(["dot", "-Tsvg", "-o", str(svg), str(target)], check=True)
                print(f"wrote {svg}")


def _print_xla(report: Any, unknown_dim: int) -> None:
    from graph_inspector.inspect_graph import example_inputs, xla_stats

    signature = report.concrete_function
    names = sorted(signature.structured_input_signature[1])
    inputs = example_inputs(signature, unknown_dim)

    def call(*tensors: Any) -> Any:
        return signature(**dict(zip(names, tensors, strict=True)))

    try:
        stats = xla_stats(call, *inputs)
    except Exception as exc:  # noqa: BLE001 - XLA is optional: say why, keep the rest
        print(f"  XLA: not compiled ({type(exc).__name__}: {_one_line(exc)[:200]})")
        return
    top = ", ".join(f"{op} {n}" for op, n in list(stats.hlo_op_counts.items())[:12])
    print(
        f"  XLA (jit_compile=True, unknown dims = {unknown_dim}): compile "
        f"{stats.compile_seconds:.2f} s, run {stats.run_seconds * 1e3:.2f} ms, "
        f"{stats.hlo_op_total} HLO instructions: {top}"
    )


def _print_mlir(report: Any, key: str, dump_dir: str | None) -> None:
    from graph_inspector.compiler_stats import mlir_stages

    for stage in mlir_stages(report.concrete_function):
        if stage.error:
            print(f"  MLIR {stage.stage}: not converted ({stage.error})")
            continue
        top = ", ".join(f"{op} {n}" for op, n in list(stage.op_counts.items())[:8])
        dialects = ", ".join(f"{d} {n}" for d, n in stage.by_dialect().items())
        print(f"  MLIR {stage.stage}: {sum(stage.op_counts.values())} ops ({dialects}): {top}")
        if dump_dir:
            name = stage.stage.replace(" ", "_").replace("/", "_")
            path = Path(dump_dir) / f"{key}.{name}.mlir"
            path.write_text(stage.text)
            print(f"    wrote {path}")


def cmd_convert(args: argparse.Namespace) -> int:
    if args.out:
        prepare_out_dir(args.out, "--out", create=False)
    folder = checked_savedmodel(args.savedmodel_dir)
    out = Path(args.out) if args.out else folder.with_name(folder.name + "_tflite")
    prepare_out_dir(out, "--out" if args.out else "default output folder", create=False)
    from phase01_common.units import format_bytes

    from graph_inspector.errors import ConversionError
    from graph_inspector.tflite import convert_savedmodel

    with native_stderr_captured() as native_log:
        try:
            result = convert_savedmodel(folder, out, signature_key=args.signature)
        except NotASavedModelError as exc:  # a corrupt saved_model.pb: a usage error
            raise CliError(str(exc)) from exc
        except UnknownSignatureError:
            raise
        except ConversionError:
            _show_native_log(native_log)
            raise
        except Exception:
            _show_native_log(native_log)
            raise
    for name, path in result.paths.items():
        v = result.validations[name]
        print(
            f"{name:<14} {path}  {format_bytes(path.stat().st_size, binary=True)}  "
            f"finite={v.all_finite} "
            f"max|TFLite-TF|={v.max_abs_diff:.2e} argmax agreement={v.argmax_agreement:.3f}"
        )
    return 0


def _show_native_log(native_log: CapturedLog) -> None:
    if os.environ.get("GRAPH_INSPECTOR_DEBUG"):
        sys.stderr.write(native_log.read())


def cmd_signatures(args: argparse.Namespace) -> int:
    folder = checked_savedmodel(args.savedmodel_dir)
    from graph_inspector.savedmodel import describe_savedmodel

    print(describe_savedmodel(folder).text())
    return 0


def cmd_quant_debug(args: argparse.Namespace) -> int:
    from graph_inspector.cli_analysis import quant_debug

    return quant_debug(args)


def cmd_profile(args: argparse.Namespace) -> int:
    from graph_inspector.cli_analysis import profile

    return profile(args)
