"""What shows warp_softmax: the demo, its report section, the benchmark and the accuracy sweep
(``python -m warp_softmax demo | bench | check``), and the helpers the tests share. The library
(``warp_softmax``) never imports this package."""
