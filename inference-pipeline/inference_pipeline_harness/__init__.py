"""Demo, report section and benchmark of the inference pipeline (not part of the library)."""
