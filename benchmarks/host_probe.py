"""How busy and how quick this machine's host is, in one line for a GPU run's env.txt.

A warm evaluation crosses four processes and a socket round trip per contestant call, so a host that is
slow or shared (another tenant's load, a hypervisor's stolen time) weighs on it far more than on a
one-process tree: run 22 (H100) read the sandboxed tree at 1.55 s where run 21 had read 1.11 s on another
machine, the kernels' own times the same. This line says which kind of host a run had: its CPUs, load,
busy and stolen time over a second, a pure-Python loop, and a socket round trip between two processes
(SOCK_SEQPACKET, as the harness's own requests travel).

    python3 benchmarks/host_probe.py [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

LOOP_N = 1_000_000
ROUND_TRIPS = 2000
SAMPLE_S = 1.0


def cpu_ticks() -> list[int] | None:
    """/proc/stat's total line: user nice system idle iowait irq softirq steal (None off Linux)."""
    try:
        return [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None


def busy_and_steal(seconds: float = SAMPLE_S) -> tuple[float, float] | None:
    """Shares of all CPUs' time over ``seconds`` spent busy and stolen by the hypervisor."""
    before = cpu_ticks()
    time.sleep(seconds)
    after = cpu_ticks()
    if before is None or after is None:
        return None
    d = [b - a for a, b in zip(before, after)]
    total = sum(d) or 1
    return (total - d[3] - d[4]) / total, d[7] / total


def loop_ms(n: int = LOOP_N) -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(n):
        acc += i
    return (time.perf_counter() - t0) * 1e3


def round_trip_us(n: int = ROUND_TRIPS) -> tuple[float, float]:
    """(median, p90) microseconds for a 32-byte message to a forked process and back."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the echo: until the parent closes its end
        ours.close()
        try:
            while msg := theirs.recv(64):
                theirs.send(msg)
        finally:
            os._exit(0)
    theirs.close()
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            ours.send(b"x" * 32)
            ours.recv(64)
            times.append((time.perf_counter() - t0) * 1e6)
    finally:
        ours.close()
        os.waitpid(pid, 0)
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.9)]


def probe() -> dict:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    shares = busy_and_steal()
    median_us, p90_us = round_trip_us()
    return {"cpus": cpus, "loadavg": list(os.getloadavg()),
            "busy_share": None if shares is None else round(shares[0], 4),
            "steal_share": None if shares is None else round(shares[1], 4),
            "python_loop_ms": round(loop_ms(), 2), "round_trip_us": round(median_us, 2),
            "round_trip_p90_us": round(p90_us, 2)}


def line(p: dict) -> str:
    load = " ".join(f"{v:.1f}" for v in p["loadavg"])
    shares = ("busy and stolen unknown" if p["busy_share"] is None else
              f"{100 * p['busy_share']:.0f}% busy, {100 * p['steal_share']:.1f}% stolen over {SAMPLE_S:.0f} s")
    return (f"host: {p['cpus']} CPUs, load {load}, {shares}; python loop of {LOOP_N:,} "
            f"{p['python_loop_ms']:.1f} ms; socket round trip {p['round_trip_us']:.1f} us "
            f"(p90 {p['round_trip_p90_us']:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the figures here too")
    args = parser.parse_args()
    p = probe()
    print(line(p))
    if args.json:
        Path(args.json).write_text(json.dumps(p, indent=1))


if __name__ == "__main__":
    main()
