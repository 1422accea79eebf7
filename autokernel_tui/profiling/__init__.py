"""Profiling: torch.profiler capture, kernel-to-op classification, Amdahl ranking, model zoo."""
