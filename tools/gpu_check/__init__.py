"""The Python steps of the root ``gpu_check.sh``: the classifier, the dynamic batcher and the
generation engine on CUDA, and the report that joins them with lab 02's results.

Each step is a module run as ``python -m gpu_check.<step> --out FILE --budget-s N
[--dry-run]``; ``gpu_check.sh`` puts ``tools/`` and the project's package folders on
``PYTHONPATH`` (nothing is installed on the lent machine). ``--dry-run`` runs the same code at
tiny sizes on the CPU, which is what ``tools/test_gpu_check.py`` exercises in ``make test``.
"""
