"""Why a call traced again: a table of causes, each with what TF does and the fixes that work.

:data:`CAUSES` is data, not code: ``rule -> CauseKind(kind, explanation, fixes)``. A rule is
picked for each argument that differs from the closest earlier trace by :data:`RULES`, an
ordered list of ``(predicate, rule)`` pairs; the fix texts are templates filled from
:func:`_fields` (the argument's path, dtypes, the generalized shape…). Every fix has a key, and
``graph_inspector_harness.retrace_fix.FIX_SCENARIOS`` applies each one to its scenario in the
tests: the retrace goes away and the outputs stay the same.
"""

# ruff: noqa: E501 - the table keeps one fix text per line, as the report prints it

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graph_inspector.retrace_args import ArgState, served_by

__all__ = ["CAUSES", "RULES", "Cause", "CauseKind", "Fix", "diff_states", "make_cause"]


@dataclass(frozen=True)
class Fix:
    key: str  # stable name; each actionable fix has a scenario that proves it
    text: str  # template: {path} {dtype} {before_dtype} {spec} {spec_name} {value} {detail}
    actionable: bool = True  # False: nothing to change (the trace is expected)


@dataclass(frozen=True)
class CauseKind:
    kind: str  # what the report prints in brackets: [shape], [python value]…
    explanation: str  # what TF does, one sentence
    fixes: tuple[Fix, ...]


NONE_NEEDED = "none needed"


def _k(kind: str, explanation: str, *fixes: tuple[str, str] | Fix) -> CauseKind:
    return CauseKind(kind, explanation, tuple(f if isinstance(f, Fix) else Fix(*f) for f in fixes))


def _info(key: str, text: str) -> Fix:
    return Fix(key, text, actionable=False)


_SIG = "give the function input_signature=[tf.TensorSpec({spec}, tf.{dtype})] (None where the size varies)"
_REDUCE = "use tf.function(reduce_retracing=True)"

CAUSES: dict[str, CauseKind] = {
    "first trace": _k("first trace", "the first call traces", _info("none", NONE_NEEDED)),
    "tensor shape": _k(
        "shape",
        "a tensor's shape is part of the trace key",
        ("input_signature", _SIG),
        ("reduce_retracing", _REDUCE),
    ),
    # Beside a tf.Variable argument an input_signature is no fix: it must list every argument,
    # and a TensorSpec for the variable hands the function a plain tensor (no .assign_add).
    "tensor shape beside a variable": _k(
        "shape",
        "a tensor's shape is part of the trace key",
        (
            "reduce_retracing",
            _REDUCE + " (an input_signature would turn the variable argument into a plain tensor)",
        ),
    ),
    # A tf.Variable argument cannot take an input_signature of TensorSpecs: the function would
    # get a plain tensor and `.assign_add` fails. reduce_retracing generalizes its shape.
    "variable shape": _k(
        "shape",
        "a variable argument's shape is part of the trace key",
        (
            "reduce_retracing",
            _REDUCE + " (not an input_signature: the function needs the variable)",
        ),
    ),
    "tensor dtype": _k(
        "dtype",
        "a tensor's dtype is part of the trace key",
        ("cast", "cast to one dtype before the call: tf.cast({path}, tf.{before_dtype})"),
    ),
    "variable dtype": _k(
        "dtype",
        "a variable argument's dtype is part of the trace key",
        (
            "one_dtype",
            "create the variables with one dtype: tf.Variable(..., dtype=tf.{before_dtype})",
        ),
    ),
    "composite shape": _k(
        "shape",
        "a RaggedTensor/SparseTensor is keyed by its TypeSpec, shape included",
        (
            "input_signature",
            "give the function input_signature=[tf.{spec_name}({spec}, tf.{dtype})] with None where the size varies",
        ),
        ("reduce_retracing", _REDUCE),
    ),
    "composite spec": _k(
        "spec",
        "a RaggedTensor/SparseTensor is keyed by its TypeSpec (ragged_rank, dtype)",
        (
            "same_structure",
            "convert to one structure before the call (the same ragged_rank and dtype, e.g. .merge_dims())",
        ),
    ),
    "python bool": _k(
        "python value",
        "a Python value is baked into the graph: one trace per value",
        (
            "tensor_argument",
            "pass tf.constant({value}) instead of a Python bool if one graph should serve both values (AutoGraph turns `if` on a tensor into tf.cond); one trace per value is fine if there are only two",
        ),
    ),
    "python number": _k(
        "python value",
        "a Python number is baked into the graph: one trace per value",
        (
            "tensor_argument",
            "pass tf.constant({value}) instead of a Python number: every distinct Python value is baked into its own graph",
        ),
    ),
    "python other": _k(
        "python value",
        "a Python value is baked into the graph: one trace per value",
        (
            "tensor_argument",
            "each distinct Python value gets its own graph: pass tf.constant({value}) (AutoGraph turns comparisons on it into tensor ops) or keep the set of values small",
        ),
    ),
    "new closure": _k(
        "new closure",
        "a function argument is keyed by identity; a new closure is a new key",
        (
            "reuse_callable",
            "a new function/closure object each call is a new cache key: create it once and reuse it{detail}",
        ),
        ("captures_as_arguments", "pass what it captures as tensor arguments"),
    ),
    "new tf.function object": _k(
        "new tf.function object",
        "each tf.function object has its own, empty, trace cache",
        (
            "hoist",
            "hoist the tf.function: create it once (module level or in __init__) and call that object; one defined inside a loop or a frequently called function starts with an empty trace cache every time",
        ),
    ),
    "captured value changed": _k(
        "captured value changed",
        "captured Python values are constants of the graph",
        ("argument", "pass the value as an argument (a tensor)"),
        ("variable", "keep it in a tf.Variable and .assign() the new value"),
    ),
    "stale closure": _k(
        "stale closure (no retrace)",
        "TF does not retrace when a captured Python value changes: the graph keeps the old value",
        ("argument", "pass it as an argument (a tensor)"),
        ("variable", "keep it in a tf.Variable and .assign() the new value"),
    ),
    "object identity": _k(
        "object identity",
        "non-tensor arguments are keyed by hash/equality (by default: identity)",
        ("reuse_object", "reuse one object"),
        ("value_hash", "give it value-based __hash__/__eq__"),
        ("pass_tensors", "pass the tensors it holds as arguments"),
    ),
    "object type": _k(
        "object type",
        "non-tensor arguments are keyed by type and hash",
        ("pass_tensors", "pass the tensors it holds as arguments"),
    ),
    "object value": _k(
        "object value",
        "this object is hashed by value (its own __hash__, e.g. a frozen dataclass): every distinct value gets its own graph, like a Python number",
        ("pass_tensors", "pass the fields that change as tensors"),
    ),
    "unhashable": _k(
        "unhashable",
        "tf.function must hash non-tensor arguments to look up a trace",
        (
            "value_hash",
            "define __hash__ and __eq__ by value (or the tracing protocol __tf_tracing_type__)",
        ),
        ("pass_tensors", "pass the tensors it holds"),
    ),
    "variable created on a later call": _k(
        "variable created on a later call",
        "tf.function allows tf.Variable creation only in the first trace",
        (
            "create_once",
            "create variables once, outside the traced code (in __init__/build, or guarded by `if self.v is None`) and only .assign() inside",
        ),
    ),
    "structure": _k(
        "structure",
        "the nesting of the arguments (list length, dict keys) is part of the trace key",
        (
            "pack_tensor",
            "keep the nesting of arguments fixed (same list length, same dict keys) or pack variable-length data into one tensor (with None for its length in input_signature)",
        ),
    ),
    "container type": _k(
        "structure",
        "the container type is part of the trace key: a list and a tuple are different keys",
        (
            "same_container",
            "pass the same container type every call (a list and a tuple, or a dict and a namedtuple, holding the same values are different trace keys)",
        ),
    ),
    "argument kind": _k(
        "argument kind",
        "a tensor and a Python value are different trace keys",
        (
            "same_kind",
            "pass the same kind of value every call (always a tensor, or always a Python value)",
        ),
    ),
    "new instance": _k(
        "new instance",
        "each object's bound tf.function method has its own trace cache",
        (
            "reuse_object",
            "expected once per instance and input signature; to share traces, reuse the object",
        ),
        (
            "function_outside_class",
            "move the computation into one tf.function outside the class that takes the tensors/variables as arguments",
        ),
    ),
    "saving a SavedModel": _k(
        "call context",
        "saving traces each function once more under its save context",
        _info(
            "none",
            "none needed: saving traces each function once more under its save context (variables are captured for export); it does not happen at serving time",
        ),
    ),
    # A call from a legacy tf.Graph (Session code) gets its own trace: proven by a fix scenario.
    # A device scope is a hint only: TF 2.21 reused the trace in every case we scripted on CPU.
    "called from": _k(
        "call context",
        "each calling graph can get its own trace",
        (
            "call_from_one_place",
            "each calling graph can get its own trace; call it from one place (or only eagerly) if this repeats",
        ),
    ),
    "device scope": _k(
        "call context",
        "each tf.device scope can get its own trace",
        _info(
            "one_scope", "each tf.device scope can get its own trace; keep calls under one scope"
        ),
    ),
    "other call context": _k(
        "call context",
        "TF keys traces by the call context as well as the arguments",
        _info(
            "none",
            "TF keys traces by the call context as well as arguments (jit_compile, distribution strategy…)",
        ),
    ),
    "traced without a call": _k(
        "traced without a call",
        "serialization traces a function directly, not through a call",
        _info(
            "none",
            "none needed: tf.saved_model.save / ExportArchive and get_concrete_function trace a function directly (for serialization), not through a call",
        ),
    ),
    "traced before monitoring": _k(
        "traced before monitoring",
        "the function had traces before the monitor saw its first call",
        _info("none", "start the monitor before the first call to see every cause"),
    ),
    "unexplained": _k(
        "unexplained",
        "the arguments equal an earlier trace as far as the monitor sees",
        _info(
            "none",
            "look for objects whose __eq__ is identity but __hash__ is by value, or a trace cache cleared by garbage collection of an argument",
        ),
    ),
}


@dataclass(frozen=True)
class Cause:
    """Why one call traced again (or failed to trace): one argument, now versus before."""

    arg: str
    kind: str
    now: str
    before: str
    fix: str
    rule: str = ""  # the CAUSES key it came from
    fix_keys: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"{self.arg}: now {self.now}, before {self.before}"

    def explain(self) -> str:
        return f"{self} [{self.kind}]\n      fix: {self.fix}"


def make_cause(
    rule: str, arg: str, now: str, before: str, fields: dict[str, Any] | None = None
) -> Cause:
    """A Cause from the table: its kind, and its fixes joined into one suggestion."""
    entry = CAUSES[rule]
    values = fields or {}
    texts = [f.text.format(**values) for f in entry.fixes]
    fix = texts[0] + "".join(f", or {t}" for t in texts[1:])
    if len(texts) > 1 and rule in ("object identity", "unhashable", "object value"):
        fix = f"{entry.explanation}: {fix}"
    keys = tuple(f.key for f in entry.fixes)
    return Cause(arg, entry.kind, now, before, fix, rule, keys)


# --- which rule explains a difference ---------------------------------------------------------

Pair = tuple[ArgState, ArgState]


def _both(kind: str) -> Callable[[Pair], bool]:
    return lambda p: p[0].kind == p[1].kind == kind


def _python(kind: type | tuple[type, ...]) -> Callable[[Pair], bool]:
    return lambda p: _both("python")(p) and isinstance(p[0].key[2], kind)


def _composite_shape(p: Pair) -> bool:
    """Only sizes differ: the same spec type, dtype, rank and ragged_rank."""
    now, before = p
    if not _both("composite")(p) or now.dtype != before.dtype or now.shape == before.shape:
        return False
    same_spec = type(now.key[1]) is type(before.key[1])
    same_rank = now.shape is not None and before.shape is not None
    same_rank = same_rank and len(now.shape) == len(before.shape)  # type: ignore[arg-type]
    ragged = getattr(now.key[1], "ragged_rank", None) == getattr(before.key[1], "ragged_rank", None)
    return same_spec and same_rank and ragged


# Checked in order; the first predicate that holds names the rule.
RULES: list[tuple[Callable[[Pair], bool], str]] = [
    (lambda p: "container" in (p[0].kind, p[1].kind) and p[0].kind == p[1].kind, "container type"),
    (lambda p: "container" in (p[0].kind, p[1].kind), "argument kind"),
    (_composite_shape, "composite shape"),
    (_both("composite"), "composite spec"),
    (lambda p: _both("tensor")(p) and p[0].dtype != p[1].dtype, "tensor dtype"),
    (_both("tensor"), "tensor shape"),
    (lambda p: _both("variable")(p) and p[0].dtype != p[1].dtype, "variable dtype"),
    (_both("variable"), "variable shape"),
    (_python(bool), "python bool"),
    (_python((int, float)), "python number"),
    (_both("python"), "python other"),
    (lambda p: p[0].kind == "callable", "new closure"),
    (lambda p: p[0].kind == "unhashable", "unhashable"),
    (lambda p: _both("object")(p) and p[0].key[1] == p[1].key[1] and p[0].by_value, "object value"),
    (lambda p: _both("object")(p) and p[0].key[1] == p[1].key[1], "object identity"),
    (_both("object"), "object type"),
]


def rule_for(now: ArgState, before: ArgState) -> str:
    for predicate, rule in RULES:
        if predicate((now, before)):
            return rule
    return "argument kind"


def _generalized_shape(a: tuple | None, b: tuple | None) -> str:
    if a is None or b is None or len(a) != len(b):
        return "None"
    dims = [str(x) if x == y else "None" for x, y in zip(a, b, strict=True)]
    return "[" + ", ".join(dims) + "]"


def _fields(path: str, now: ArgState, before: ArgState) -> dict[str, Any]:
    """What the fix templates may name."""
    changed = [f"{n} now {v}" for (n, v) in now.closure if (n, v) not in before.closure]
    spec = now.key[1] if now.kind == "composite" else None
    return {
        "path": path,
        "dtype": now.dtype,
        "before_dtype": before.dtype,
        "spec": _generalized_shape(now.shape, before.shape),
        "spec_name": type(spec).__name__ if spec is not None else "TensorSpec",
        "value": repr(now.key[2]) if now.kind == "python" else now.text,
        "detail": f" (captured {', '.join(changed)})" if changed else "",
    }


def cause_for(path: str, now: ArgState | None, before: ArgState | None) -> Cause:
    if now is None or before is None:
        present = now or before
        assert present is not None
        now_text = "absent" if now is None else present.text
        before_text = "absent" if before is None else present.text
        return make_cause("structure", path, now_text, before_text)
    rule = rule_for(now, before)
    kind = CAUSES[rule].kind
    if rule == "composite spec" and now.dtype != before.dtype:
        kind = "dtype"
    cause = make_cause(rule, path, now.text, before.text, _fields(path, now, before))
    return Cause(cause.arg, kind, cause.now, cause.before, cause.fix, rule, cause.fix_keys)


def diff_states(now: dict[str, ArgState], before: dict[str, ArgState]) -> list[Cause]:
    """Each argument leaf the trace made for ``before`` cannot serve, as a Cause."""
    causes = []
    for path in list(now) + [p for p in before if p not in now]:
        a, b = now.get(path), before.get(path)
        if a is not None and b is not None and served_by(a, b):
            continue
        causes.append(cause_for(path, a, b))
    # A container that changed type (list -> tuple, tensor -> list) explains what is inside it.
    changed = [
        c.arg
        for c in causes
        if any(
            st is not None and st.kind == "container" for st in (now.get(c.arg), before.get(c.arg))
        )
    ]
    causes = [c for c in causes if not any(c.arg.startswith(p + "[") for p in changed)]
    if any(st.kind == "variable" for st in now.values()):
        causes = [_beside_a_variable(c) for c in causes]
    return causes


def _beside_a_variable(cause: Cause) -> Cause:
    """A tensor whose shape changed next to a variable argument: reduce_retracing only."""
    if cause.rule != "tensor shape":
        return cause
    return make_cause("tensor shape beside a variable", cause.arg, cause.now, cause.before)


def context_changes(now: dict[str, str], before: dict[str, str]) -> list[Cause]:
    """Causes in the call context (saving, calling graph, device scope…), not the arguments."""
    changed = [k for k in now if k in before and now[k] != before[k]]
    if "saving a SavedModel" in changed and "variable policy" in changed:
        changed.remove("variable policy")  # the save context sets it: one cause, not two
    rules = {"saving a SavedModel", "called from", "device scope"}
    return [
        make_cause(key if key in rules else "other call context", f"<{key}>", now[key], before[key])
        for key in changed
    ]


def capture_changes(
    now: dict[str, tuple[str, Any]], before: dict[str, tuple[str, Any]], rule: str
) -> list[Cause]:
    """Captured Python values that changed since a trace (``rule``: a retrace's "captured
    value changed", or a reused trace's "stale closure")."""
    return [
        make_cause(rule, f"<captured> {name}", now[name][0], before[name][0])
        for name in sorted(set(now) & set(before))
        if now[name][1] != before[name][1]
    ]


def reduce_retracing_on(cause: Cause) -> Cause:
    """reduce_retracing is already on: do not suggest it; say what TF does instead."""
    if cause.kind != "shape":
        return cause
    others = [f for f in CAUSES[cause.rule].fixes if f.key != "reduce_retracing"]
    rest = cause.fix.split(", or ")[0] if others else "pass one shape"
    rest = rest.split(" (None where")[0]
    fix = (
        "reduce_retracing is on: TF traced once more, generalized (None where sizes differ), "
        f"and later sizes reuse that trace; to avoid even this trace, {rest}"
    )
    return Cause(cause.arg, cause.kind, cause.now, cause.before, fix, cause.rule, cause.fix_keys)
