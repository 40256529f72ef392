"""Runnable, tested answers to the core PyTorch / TensorFlow practice questions.

One module per question:

1. :mod:`fundamentals.swish`: a custom autograd Function for swish (torch and minigrad).
2. :mod:`fundamentals.autograd_basics`: requires_grad, the recorded graph, backward.
3. :mod:`fundamentals.tf_variables`: tf.constant vs tf.Variable, GradientTape, Keras SGD.
4. :mod:`fundamentals.finetune`: head replacement, freezing, layer-wise learning-rate decay.

Extra (a spec interview question): :mod:`fundamentals.attention`, a custom backward for fused
attention that saves the row log-sum-exp instead of the n × n probabilities.

``python -m fundamentals --help`` lists the commands (one per question, and ``demo``, which
runs them all); the demo and the report section live beside this package, in
``fundamentals_harness``. Heavy libraries (TensorFlow, transformers, minigrad) are imported
inside the modules that need them, so importing this package stays cheap.
"""
