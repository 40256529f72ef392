"""What shows minigrad: the demo and its report section, the benchmark, the case tables, the
guide's explain demos and the torch comparison helper the tests share. Not part of the library:
``minigrad`` never imports this package (only ``python -m minigrad demo|bench|explain`` does)."""
