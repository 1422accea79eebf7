"""The harness's worker side: processes that import torch, triton and the standard library only.

* ``judge``: the trusted process the runner talks to. It makes the inputs, runs
  the reference, checks every output, takes the baselines and writes the
  verdict. It never imports candidate code.
* ``zygote``: a fork server started by the judge before CUDA is initialised;
  it forks one fresh contestant per kernel source per evaluation.
* ``contestant``: the only process that imports a candidate's ``kernel.py``,
  confined by Landlock inside the bwrap sandbox; it rebuilds inputs from the
  judge's seeds, calls ``kernel_fn``, times it with the one timer and hands its
  outputs back.

The one timer is ``timing``; the one checker is ``correctness``. Benchmarks and
tests measure through these two and nothing else.
"""
