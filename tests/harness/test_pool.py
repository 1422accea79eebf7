"""Several harnesses at once: a local pool (one per GPU, or a few on the CPU) and the Ray backend
on a local Ray cluster (the engine, git and the workspace stay on the head; only text travels)."""

from __future__ import annotations

import threading
import time

import pytest

from autokernel_tui.harness.pool import HarnessPool, local_pool, parse_gpus, ray_pool

from .conftest import GOOD, PREFIX

SLOW = PREFIX + '''
def kernel_fn(x, weight, eps):
    y = torch.empty_like(x)
    for _ in range(4):
        launch(x, weight, eps, y)
    return y
'''


def test_gpus_setting_is_parsed():
    assert parse_gpus("0,2,3") == [0, 2, 3]
    assert parse_gpus("all") is None or all(isinstance(g, int) for g in parse_gpus("all"))
    with pytest.raises(ValueError, match="GPU indices"):
        parse_gpus("first")


def test_a_local_pool_evaluates_on_every_member_at_once(tiny_task):
    with local_pool(None, cpu_workers=2, timeout_s=120) as pool:
        assert pool.size == 2
        reports, busy_seen = [], []

        def one():
            reports.append(pool.evaluate(tiny_task, kernel_source=GOOD, quick=True))

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            busy_seen.append(pool.busy)
            time.sleep(0.05)
        assert [r.status for r in reports] == ["PASS", "PASS"]
        assert max(busy_seen) == 2  # both members worked at the same time
        assert pool.device_info()["pool"] == ["CPU (Triton interpreter)"] * 2


def test_the_ray_backend_runs_the_harness_in_actors_of_a_local_cluster(tiny_task):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pool = ray_pool(None, members=2, timeout_s=120)
        try:
            assert isinstance(pool, HarnessPool) and pool.size == 2
            report = pool.evaluate(tiny_task, kernel_source=GOOD, quick=True)
            assert report.status == "PASS" and report.task == "rmsnorm", report.reason
            cmp = pool.compare(tiny_task, GOOD, SLOW, quick=True)
            assert cmp.status == "PASS" and cmp.speedup > 1.5
            bad = pool.evaluate(tiny_task, kernel_source=GOOD.replace("eps, torch.empty_like", "1e9, torch.empty_like"),
                                quick=True)
            assert bad.status == "FAIL"
            # The head checks harness-owned files before anything travels.
            from autokernel_tui.tasks.spec import owned_file_hashes
            hashes = dict(owned_file_hashes(tiny_task), **{"reference.py": "0" * 64})
            assert pool.evaluate(tiny_task, kernel_source=GOOD, quick=True, owned_hashes=hashes).status == "REJECTED"
        finally:
            pool.close()
    finally:
        ray.shutdown()
