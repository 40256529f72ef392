"""``python -m fundamentals <command>``: the practice questions' answers, run from the command line.

Commands:
  autograd   Q2: y = 3x² + 2x, its gradient and the order backward() runs the graph
  swish      Q1: the swish autograd Function checked with gradcheck / gradgradcheck
  tf         Q3: tf.constant vs tf.Variable and one GradientTape step
  finetune   Q4: fine-tune MiniLM on BBC News (frozen base, then layer-wise LR decay)
  demo       every answer with its checks (the report section of `make demo`)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from phase01_common.cli import OneLineArgumentParser, positive_int

COMMAND_HELP = {
    line.split()[0]: line.split(maxsplit=1)[1]
    for line in __doc__.split("Commands:\n")[1].strip().splitlines()
}


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _autograd(args: argparse.Namespace) -> int:
    from fundamentals import autograd_basics

    for library, example in (
        ("torch", autograd_basics.worked_example_torch(args.x)),
        ("minigrad", autograd_basics.worked_example_minigrad(args.x)),
    ):
        print(
            f"{library:8}  y = 3x² + 2x at x = {example.x:g}: y = {example.y:g}, "
            f"dy/dx = {example.dydx:g}"
        )
        print(f"{'':8}  backward ran: {' → '.join(example.graph)}")
    return 0


def _swish(args: argparse.Namespace) -> int:
    from fundamentals.swish import check_swish_torch

    facts = check_swish_torch(seed=args.seed)
    for name, value in facts.items():
        print(f"{name:28} {value:.3g}" if isinstance(value, float) else f"{name:28} {value}")
    passed = facts["gradcheck"] and facts["gradgradcheck"] and facts["finite_at_1000"]
    return 0 if passed else 1


def _tf(args: argparse.Namespace) -> int:
    from fundamentals import tf_variables

    gradient, x_after = tf_variables.one_tape_step(args.x0, args.lr)
    x_final, losses = tf_variables.minimise_with_keras_sgd(args.x0, args.lr, args.steps)
    print(
        f"one GradientTape step on (x − 5)² from {args.x0:g}, lr {args.lr:g}: "
        f"gradient {gradient:g}, x → {x_after:g}"
    )
    print(
        f"Keras SGD, {args.steps} steps: x = {x_final:.6f} (loss {losses[0]:.3g} → "
        f"{losses[-1]:.3g})"
    )
    return 0


def _finetune(args: argparse.Namespace) -> int:
    from fundamentals import finetune

    config = finetune.FineTuneConfig(
        train_per_label=args.train_per_label,
        dev_per_label=args.dev_per_label,
        max_length=args.max_length,
        seed=args.seed,
    )
    print(
        f"fine-tuning all-MiniLM-L6-v2 on {5 * config.train_per_label} BBC News articles …",
        flush=True,
    )
    result = finetune.run_finetune(config)
    acc = result.accuracy
    print(
        f"dev accuracy on {result.dev_size} articles: fresh head {acc['before']:.3f} → "
        f"head only {acc['after_phase_one']:.3f} → all layers, LLRD "
        f"{acc['after_phase_two']:.3f}"
    )
    for name, lr, weight_decay, tensors, parameters in result.group_rows:
        print(
            f"  {name:24} lr {lr:.3g}  weight decay {weight_decay:g}  "
            f"{tensors} tensors, {parameters:,} parameters"
        )
    return 0


def _demo(args: argparse.Namespace) -> int:
    from fundamentals_harness.demo import run_demo  # the harness: only this command needs it

    return run_demo(args.out, quick=args.quick)


def build_parser() -> OneLineArgumentParser:
    """Every command and its options, each checked by its argparse ``type``: the parser needs
    only the standard library and ``phase01_common.cli``, so --help and bad arguments answer
    without torch or TensorFlow (each command imports what it needs when it runs)."""
    parser = OneLineArgumentParser(
        prog="python -m fundamentals",
        description="Runnable answers to the core PyTorch / TensorFlow practice questions.",
    )
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "autograd": _autograd,
        "swish": _swish,
        "tf": _tf,
        "finetune": _finetune,
        "demo": _demo,
    }
    sub = {
        name: commands.add_parser(name, help=COMMAND_HELP[name], description=COMMAND_HELP[name])
        for name in handlers
    }
    for name, handler in handlers.items():
        sub[name].set_defaults(handler=handler)
    sub["autograd"].add_argument("--x", type=_finite_float, default=4.0, help="default 4")
    sub["swish"].add_argument("--seed", type=int, default=0)
    sub["tf"].add_argument("--x0", type=_finite_float, default=0.0, help="start (default 0)")
    sub["tf"].add_argument("--lr", type=_positive_float, default=0.1, help="default 0.1")
    sub["tf"].add_argument("--steps", type=positive_int, default=100, help="default 100")
    for option, default in (
        ("--train-per-label", 30),
        ("--dev-per-label", 30),
        ("--max-length", 48),
    ):
        sub["finetune"].add_argument(
            option, type=positive_int, default=default, help=f"default {default}"
        )
    sub["finetune"].add_argument("--seed", type=int, default=0)
    sub["demo"].add_argument("--quick", action="store_true", help="smaller fine-tuning run")
    sub["demo"].add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the loss plot (default: report/fundamentals at the repository root)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.handler(args)
    except ValueError as exc:  # bad input the library refused: one line, not a traceback
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
