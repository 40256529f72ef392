"""Export, optimize, quantize and gate a Transformer classifier, then serve and load-test it."""
