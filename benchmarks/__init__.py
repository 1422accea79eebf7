"""Scripts that produce the numbers in docs/ (see README.md here).

A package so that tests import them by name (``from benchmarks import starters_check``)
and they import each other the same way; each still runs as a file
(``python3 benchmarks/kernel_quality.py``). They time with the harness's one timer
(``autokernel_tui.harness.worker.timing``) and check with its one checker
(``autokernel_tui.harness.worker.correctness``).
"""
