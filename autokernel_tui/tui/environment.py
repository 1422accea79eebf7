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


# Run in a child Python: the answer the harness's worker would give, without torch or CUDA ever
# starting in the app's process (which goes on to run the engine: DESIGN.md rule 2 keeps torch
# in the worker). Its last line of output is the GPU's name, or empty for none.
_PROBE = ("import torch\n"
          "print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')\n")
PROBE_TIMEOUT_S = 120.0


def device_label(timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """The GPU name, or the CPU statement. Asks a short-lived child process (a cold torch import
    and CUDA start take seconds): call it off the UI thread. No torch here, a child that fails or
    hangs, or a broken driver: the CPU statement (the loop still works there)."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    except (OSError, subprocess.SubprocessError):
        return CPU_LABEL
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    return lines[-1].strip() if lines and lines[-1].strip() else CPU_LABEL
