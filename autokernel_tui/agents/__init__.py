"""Agents that propose a new kernel.py: Claude, OpenAI-compatible, offline tuner."""
