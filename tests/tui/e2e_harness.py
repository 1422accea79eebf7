"""``AUTOKERNEL_HARNESS_FACTORY=e2e_harness:make_harness`` for the tmux end-to-end test: the real
harness, with a keep margin far below 1 so every passing candidate counts as "faster" and reaches
the manual gate (Triton-interpreter timings are noise; the test must not wait on luck).

A setting cannot ask for this: ``harness.keep_margin`` must be at least 1 (below it a slower
candidate would be kept as faster), so the test plugs in its own harness through the hook.
"""


def make_harness(settings):
    from autokernel_tui.harness.runner import Harness

    return Harness(timeout_s=settings.harness.timeout_s, device="auto", keep_margin=0.0001,
                   confirm_keeps=settings.harness.confirm_keeps)
