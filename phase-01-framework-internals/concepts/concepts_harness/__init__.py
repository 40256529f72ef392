"""Demo, report section and benchmark of the concepts package (not part of the library)."""
