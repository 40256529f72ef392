"""The house rules on imports, over every package of the project (tests excluded):

- no import cycle between modules, lazy imports (inside functions) included: a lazy import is
  still a two-way dependency, it only moves the failure to run time;
- no ``_private`` name taken from another module, whether by ``from mod import _name`` or by
  ``mod._name`` on an imported module: a helper two modules need moves to a module both import,
  under a public name.

Each rule is also checked on small synthetic packages, so a broken walker cannot pass by finding
nothing. The graph is read from the source with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_FOLDERS = {"tests", "build", "dist", "__pycache__"}


@dataclass
class ImportGraph:
    modules: dict[str, Path]  # dotted name -> file
    edges: dict[str, set[str]] = field(default_factory=dict)  # module -> modules it imports
    private: list[str] = field(default_factory=list)  # "importer: module._name"

    def cycles(self) -> list[list[str]]:
        """The strongly connected sets of two or more modules (each one a cycle or several),
        by Tarjan's algorithm (a few hundred modules: recursion depth is no concern)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def connect(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for succ in sorted(self.edges.get(node, ())):
                if succ not in index:
                    connect(succ)
                    low[node] = min(low[node], low[succ])
                elif succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        for start in sorted(self.modules):
            if start not in index:
                connect(start)
        return sorted(found)


def package_roots(root: Path) -> list[Path]:
    """The folders holding a ``pyproject.toml``: each installs its packages from there."""
    return sorted(
        p.parent
        for p in root.rglob("pyproject.toml")
        if not any(part.startswith(".") or part in SKIPPED_FOLDERS for part in p.parts)
    )


def project_modules(roots: list[Path]) -> dict[str, Path]:
    """Every module of every package (a folder with ``__init__.py``) under each root."""
    modules: dict[str, Path] = {}
    for base in roots:
        for init in sorted(base.glob("*/__init__.py")):
            package = init.parent
            for path in sorted(package.rglob("*.py")):
                rel = path.relative_to(base)
                if any(part in SKIPPED_FOLDERS for part in rel.parts[:-1]):
                    continue
                if path.name.startswith("test_") or path.name == "conftest.py":
                    continue
                parts = list(rel.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = path
    return modules


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The dotted name a relative ``from`` import names, seen from ``module``."""
    if not level:
        return target or ""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def build_graph(modules: dict[str, Path]) -> ImportGraph:
    graph = ImportGraph(modules, {name: set() for name in modules})
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        bound: dict[str, str] = {}  # local name -> project module it refers to
        for node in ast.walk(tree):  # every import, at module level or inside a function
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets.append(alias.name)
                    if alias.asname and alias.name in modules:
                        bound[alias.asname] = alias.name
                    elif not alias.asname:
                        top = alias.name.split(".")[0]
                        if top in modules:
                            bound[top] = top
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(name, is_package, node.level, node.module)
                targets.append(base)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in modules:  # a submodule: `from pkg import mod`
                        targets.append(full)
                        bound[alias.asname or alias.name] = full
                    elif (
                        alias.name.startswith("_")
                        and not alias.name.startswith("__")
                        and base in modules
                        and base != name
                    ):
                        graph.private.append(f"{name}: {base}.{alias.name}")
            for target in targets:
                # A submodule reading its own package (`from pkg import x` in pkg.mod) is the
                # package's namespace, not a second concept: not an edge.
                if target in modules and target != name and not name.startswith(target + "."):
                    graph.edges[name].add(target)
        for node in ast.walk(tree):  # `mod._name` on a project module bound above
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                owner = bound[node.value.id]
                if owner != name and f"{owner}.{node.attr}" not in modules:
                    graph.private.append(f"{name}: {owner}.{node.attr}")
    graph.private = sorted(set(graph.private))
    return graph


def project_graph() -> ImportGraph:
    return build_graph(project_modules(package_roots(ROOT)))


# --- the walker itself, on packages made for the purpose -------------------------------------


def _write(root: Path, files: dict[str, str]) -> ImportGraph:
    (root / "pyproject.toml").write_text("[project]\nname = 'synthetic'\n")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return build_graph(project_modules(package_roots(root)))


def test_walker_finds_a_lazy_cycle_and_private_names(tmp_path: Path) -> None:
    graph = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import run\n",
            "pkg/a.py": "from pkg.b import helper\n\ndef run():\n    return helper()\n",
            # The import back into `a` is lazy: still a cycle.
            "pkg/b.py": "def helper():\n    from pkg import a\n    return a._secret\n",
            "pkg/c.py": "from . import b\nfrom .a import _hidden\nimport pkg.b as bee\nbee._x\n",
            "pkg/tests/test_x.py": "from pkg.c import _anything\n",  # tests are not walked
        },
    )
    assert set(graph.modules) == {"pkg", "pkg.a", "pkg.b", "pkg.c"}
    assert graph.cycles() == [["pkg.a", "pkg.b"]]
    assert graph.private == ["pkg.b: pkg.a._secret", "pkg.c: pkg.a._hidden", "pkg.c: pkg.b._x"]


def test_walker_accepts_a_clean_package(tmp_path: Path) -> None:
    graph = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import run\n__all__ = ['run']\n",
            "pkg/shared.py": "def helper():\n    return 1\n\ndef _own():\n    return _own\n",
            "pkg/a.py": "import pkg\nfrom pkg.shared import helper\n\ndef run():\n"
            "    from pkg import b\n    return helper() + b.value()\n",
            "pkg/b.py": "from .shared import helper\n\ndef value():\n    return helper()\n",
        },
    )
    assert len(graph.modules) == 4 and graph.edges["pkg.a"] == {"pkg.shared", "pkg.b"}
    assert graph.cycles() == [] and graph.private == []


# --- the project ------------------------------------------------------------------------------


def test_every_package_is_walked() -> None:
    graph = project_graph()
    packages = {name for name, path in graph.modules.items() if path.name == "__init__.py"}
    print(f"import graph: {len(graph.modules)} modules in {len(packages)} packages")
    for expected in ("phase01_common", "graph_inspector", "fundamentals", "inference_pipeline"):
        assert expected in packages
    assert len(graph.modules) > 100


def test_no_import_cycles() -> None:
    graph = project_graph()
    cycles = graph.cycles()
    print(f"import graph: {len(graph.modules)} modules walked, {len(cycles)} cycle(s)")
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_private_names_across_modules() -> None:
    graph = project_graph()
    print(f"import graph: {len(graph.modules)} modules walked, {len(graph.private)} private")
    assert not graph.private, "private names imported across modules:\n" + "\n".join(graph.private)
