"""What shows graph_inspector: the demo, the report section, the benchmark and the scenarios the
tests share. Only ``python -m graph_inspector demo|bench`` (graph_inspector/__main__.py) imports
it; the library never does."""
