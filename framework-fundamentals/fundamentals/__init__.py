"""Runnable, tested answers to the core PyTorch / TensorFlow practice questions.

One module per question:

1. :mod:`fundamentals.swish`: a custom autograd Function for swish (torch and minigrad).
2. :mod:`fundamentals.autograd_basics`: requires_grad, the recorded graph, backward.
3. :mod:`fundamentals.tf_variables`: tf.constant vs tf.Variable, GradientTape, Keras SGD.
4. :mod:`fundamentals.finetune`: head replacement, freezing, layer-wise learning-rate decay.

Extra (a spec interview question): :mod:`fundamentals.attention`, a custom backward for fused
attention that saves the row log-sum-exp instead of the n × n probabilities.

``python -m fundamentals`` runs every answer; :mod:`fundamentals.report_section` feeds the
demo report. Heavy libraries (TensorFlow, transformers, minigrad) are imported inside the
modules that need them, so importing this package stays cheap.
"""
