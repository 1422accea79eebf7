from autokernel_tui.agents.memory import digest


def _rows(n):
    statuses = ["discard", "fail", "keep", "crash", "discard", "timeout"]
    rows = []
    for i in range(1, n + 1):
        s = statuses[i % len(statuses)]
        rows.append({"experiment": i, "status": s, "speedup_vs_baseline": f"{1 + i / 1000:.3f}",
                     "speedup_vs_incumbent": "0.98", "description": f"idea number {i} " + "x" * 40,
                     "reason": f"shape odd-{i}: max_abs_err {i * 0.01:.2f} > atol 0.01" if s == "fail" else
                     ("CRASH: illegal memory access at 0x7f{:04x}".format(i) if s == "crash" else ""),
                     "source": "def kernel_fn(): pass\n" * 50})
    return rows


def test_empty_history_says_so():
    assert "No experiments" in digest([])


def test_digest_stays_bounded_over_hundreds_of_experiments():
    sizes = [len(digest(_rows(n), max_chars=3000)) for n in (10, 100, 500, 1000)]
    assert all(s <= 3000 for s in sizes)
    text = digest(_rows(1000), max_chars=3000)
    assert text.startswith("1000 experiments on this task so far")
    assert "exp 1000 [" in text  # the latest is always shown
    assert "def kernel_fn" not in text  # sources never leak into the digest


def test_failures_are_grouped_by_reason_with_counts():
    text = digest(_rows(120), max_chars=20000)
    # every numbered variant of the same failure collapses into one line with a count
    fail_lines = [line for line in text.splitlines() if "max_abs_err" in line and line.startswith("- ") and "x shape" in line]
    assert len(fail_lines) == 1 and fail_lines[0].startswith("- 19x")
    assert "Kept (each became the incumbent)" in text
