"""A stand-in for pytest, for GPU machines whose Python has torch but no pytest and no package
registry (gpu_check.sh uses it only when `import pytest` fails). It understands exactly what
the lab's tests use: mark.parametrize (stacked), mark.skipif, mark.filterwarnings (ignored),
param, raises, skip, tmp_path; a folder argument means its test_*.py files.

    python gpu/mini_pytest.py test_lab.py tests [-k substring]
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import itertools
import re
import sys
import tempfile
import traceback
import types
from pathlib import Path


class Skipped(Exception):
    pass


def _mark_parametrize(names, values):
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)

    def decorate(fn):
        fn.__dict__.setdefault("_params", []).insert(0, (names, list(values)))
        return fn

    return decorate


def _mark_skipif(condition, reason=""):
    def decorate(fn):
        if condition:
            fn._skip_reason = reason
        return fn

    return decorate


class _Param:
    def __init__(self, *values, marks=()):
        self.values, self.marks = values, marks


@contextlib.contextmanager
def _raises(exc_type, match=None):
    try:
        yield
    except exc_type as e:
        if match is not None and not re.search(match, str(e)):
            raise AssertionError(f"{exc_type.__name__} raised but {match!r} not in {e}") from e
        return
    raise AssertionError(f"{exc_type.__name__} not raised")


def _skip(reason=""):
    raise Skipped(reason)


def install() -> None:
    mark = types.SimpleNamespace(
        parametrize=_mark_parametrize,
        skipif=_mark_skipif,
        filterwarnings=lambda *a, **k: lambda obj: obj,
    )
    sys.modules["pytest"] = types.SimpleNamespace(
        mark=mark, param=_Param, raises=_raises, skip=_skip, main=lambda *a, **k: 0
    )


def _cases(fn):
    axes = []
    for names, values in getattr(fn, "_params", []):
        rows = []
        for v in values:
            v = v.values if isinstance(v, _Param) else v
            rows.append(dict(zip(names, v if len(names) > 1 else (v,), strict=True)))
        axes.append(rows)
    for combo in itertools.product(*axes):
        kwargs = {}
        for part in combo:
            kwargs.update(part)
        yield kwargs


def _test_files(args: list[str]) -> list[Path]:
    files: list[Path] = []
    for arg in args:
        path = Path(arg).resolve()
        files += sorted(path.glob("test_*.py")) if path.is_dir() else [path]
    return files


def main(argv: list[str]) -> int:
    install()
    pattern = argv[argv.index("-k") + 1] if "-k" in argv else ""
    paths = [a for i, a in enumerate(argv) if a != "-k" and (i == 0 or argv[i - 1] != "-k")]
    counts = [0, 0, 0]
    for path in _test_files(paths):
        print(f"== {path.name}")
        for i, n in enumerate(_run_file(path, pattern)):
            counts[i] += n
    passed, failed, skipped = counts
    print(f"mini_pytest: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


def _run_file(path: Path, pattern: str) -> tuple[int, int, int]:
    spec = importlib.util.spec_from_file_location(f"mini_pytest_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    passed = failed = skipped = 0
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if not name.startswith("test_") or pattern not in name:
            continue
        for kwargs in _cases(fn):
            label = f"{name}[{'-'.join(str(v) for v in kwargs.values())}]"
            if getattr(fn, "_skip_reason", None):
                skipped += 1
                print(f"SKIP {label}: {fn._skip_reason}")
                continue
            try:
                if "tmp_path" in inspect.signature(fn).parameters:
                    with tempfile.TemporaryDirectory() as tmp:
                        fn(**kwargs, tmp_path=Path(tmp))
                else:
                    fn(**kwargs)
                passed += 1
            except Skipped as e:
                skipped += 1
                print(f"SKIP {label}: {e}")
            except Exception:
                failed += 1
                print(f"FAIL {label}\n{traceback.format_exc()[-2000:]}")
    return passed, failed, skipped


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
