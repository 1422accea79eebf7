"""What the app says it runs on and with: device and agent, never a key."""

from __future__ import annotations

import os
from typing import Mapping

CPU_LABEL = "CPU: Triton interpreter, timings not meaningful"


def agent_label(agent_settings, env: Mapping[str, str] | None = None) -> str:
    """Which agent "auto" picks, the same rule as agents.make_agent; names the source, never the key."""
    env = os.environ if env is None else env
    kind = agent_settings.kind
    if kind == "auto":
        if env.get("ANTHROPIC_API_KEY"):
            kind = "claude"
        elif agent_settings.openai_base_url:
            kind = "openai"
        else:
            kind = "tuner"
    if kind == "claude":
        return f"Claude ({agent_settings.model}, ANTHROPIC_API_KEY is set)"
    if kind == "openai":
        return f"local OpenAI-compatible server {agent_settings.openai_base_url} ({agent_settings.openai_model or 'default model'})"
    return "offline tuner (no API key: searches the kernel's knobs)"


def device_label() -> str:
    """The GPU name, or the CPU statement. Imports torch: call it off the UI thread."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # no torch or a broken driver: the CPU path still works
        pass
    return CPU_LABEL
