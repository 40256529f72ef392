"""The demo report's concepts section builds, passes its checks and shows what the issue asks."""

from __future__ import annotations

from concepts_harness.report_section import build_section


def test_quick_section_has_graphs_plot_memory_and_headline(tmp_path):
    section = build_section(tmp_path, quick=True)
    assert section.passed, [c for c in section.checks if not c.passed]
    assert len(section.headline) == 3
    titles = [title for title, _ in section.texts]
    assert any("before decomposition" in t for t in titles)
    assert any("after decomposition" in t for t in titles)
    tables = {t.title.split(":")[0] for t in section.tables}
    assert {"compile", "fx", "precision", "memory"} <= tables
    assert not any(t.has_nan() for t in section.tables)
    (image,) = section.images
    assert image.path.is_file() and image.path.stat().st_size > 10_000
