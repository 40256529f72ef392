"""How `make test` spreads the suite over two pytest-xdist workers (pytest.ini: ``-n 2``).

A worker takes a whole test file at a time, so a module's fixtures are built once. Files
that share a session fixture costing more than a few seconds are one unit, on one worker,
so the fixture is built once per run rather than once per worker (the on-disk caches of the
fine-tune, the quick build and the GPT are behind ``phase01_common.locks.exclusive``, so two
workers needing one of those wait for each other instead of building it twice). The longest
units are handed out first so the two workers finish together.

xdist's own ``--dist loadgroup`` does not group with pytest 9 (it renames ``item._nodeid``,
which pytest 9 no longer reads), so the grouping is a scheduler of our own: xdist's
``LoadScopeScheduling`` with the unit of work computed from the test's path.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

# Files that share one expensive session fixture: (group, path prefixes).
SHARED_FIXTURE_GROUPS = (
    # quick_report: one `tools/run_demo.py --quick`, read by the report and browser tests
    ("report", ("tools/test_report.py", "tools/test_report_browser.py")),
    # lab 03's `demo`: the quick TF pipeline (BERT-tiny trained, SavedModel, TFLite)
    (
        "lab03-pipeline",
        (
            "phase-01-framework-internals/lab-03-graph-inspector/test_lab.py",
            "phase-01-framework-internals/lab-03-graph-inspector/tests/test_inspect.py",
            "phase-01-framework-internals/lab-03-graph-inspector/tests/test_tflite.py",
        ),
    ),
    # inference-pipeline's ray_serve: one Ray Serve for the protocol suite's "ray" front end
    # and the Ray test (one Ray cluster on the machine at a time)
    (
        "ray",
        (
            "inference-pipeline/tests/test_serving_protocol.py",
            "inference-pipeline/tests/test_serving_ray.py",
        ),
    ),
)

# Handed out first, longest first (worker-seconds measured with the suite's own run on two
# workers, per unit): a long unit that started last would leave the other worker idle at the
# end. The rest follow in collection order.
LONGEST_FIRST = (
    "report",
    "inference-pipeline/tests/test_commands.py",
    "lab03-pipeline",
    "tools/test_gpu_check.py",
    "phase-01-framework-internals/lab-02-warp-softmax/tests/test_cuda.py",
    "inference-pipeline/tests/test_openvino.py",
    "phase-01-framework-internals/lab-02-warp-softmax/tests/test_build.py",
    "inference-pipeline/tests/test_cli_offline.py",
    "inference-pipeline/tests/test_export.py",
    "inference-pipeline/tests/test_real_build.py",
)


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its group's name, or its file."""
    path = nodeid.split("::", 1)[0]
    for group, prefixes in SHARED_FIXTURE_GROUPS:
        if path.startswith(prefixes):
            return group
    return path


class SharedFixtureScheduling(LoadScopeScheduling):
    """Load-scope scheduling whose scope is :func:`unit_of` (a file, or a group of files)."""

    # _split_scope is the method LoadScopeScheduling's own subclasses (by file, by group)
    # override to choose the unit of work.
    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


@pytest.hookimpl(tryfirst=True)  # xdist's own choice (by --dist) is trylast
def pytest_xdist_make_scheduler(config: pytest.Config, log) -> SharedFixtureScheduling:
    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest units first; the rest keep their collection order (a stable sort)."""
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(unit_of(item.nodeid), len(rank)))
