"""Start `autokernel-tui run --headless` as a real subprocess with the engine fakes."""

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def engine_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOKERNEL_")}
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AUTOKERNEL_HARNESS_FACTORY"] = "enginefakes:make_harness"
    env["TRITON_INTERPRET"] = "1"
    env.update(extra)
    return env


def run_args(ws, *flags: str, agent: str = "enginefakes:make_agent") -> list:
    return [sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(ws), "--agent", agent, *flags]


def start(ws, *flags: str, env: dict | None = None, agent: str = "enginefakes:make_agent") -> subprocess.Popen:
    return subprocess.Popen(run_args(ws, *flags, agent=agent), env=env or engine_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_socket(ws, proc, timeout=30.0) -> None:
    sock = Path(ws) / ".autokernel" / "control.sock"
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError(f"engine exited {proc.returncode}: {proc.stdout.read()}")
        if sock.exists():
            return
        time.sleep(0.05)
    raise AssertionError("the engine never served its control socket")
