"""One line that says where the run stands: state, policy, experiment, clock, kernel, best, spend, device."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui.live_state import LiveState

STATE_STYLE = {
    "running": ("RUNNING", "bold #000000 on #5fd75f"),
    "paused": ("PAUSED", "bold #000000 on #d7af5f"),
    "awaiting_approval": ("AWAITING APPROVAL", "bold #000000 on #ffaf00 blink"),
    "stopped": ("STOPPED", "bold #ffffff on #875f5f"),
    "idle": ("IDLE", "bold #ffffff on #585858"),
}


SPINNER = "◐◓◑◒"
CPU_BASE_NOTE = "vs base n/a"  # after the CPU label: speedups vs eager torch mean nothing there


def header_text(state: LiveState, now: float, attached: bool = False) -> Group:
    """Line 1 (wrapped when narrow): where the run stands. Line 2 (one line, cut with an ellipsis):
    what the engine is doing right now, with its clock."""
    return Group(status_line(state, now, attached), activity_line(state, now))


def status_line(state: LiveState, now: float, attached: bool = False) -> Text:
    label, style = STATE_STYLE.get(state.state, (state.state.upper(), "bold reverse"))
    if state.awaiting:
        label, style = STATE_STYLE["awaiting_approval"]
    text = Text(no_wrap=False)
    text.append(f" {label} ", style)
    if state.stop_requested and state.state != "stopped":
        text.append(" stopping after this experiment… ", "bold #000000 on #d78787")
    elif state.pause_requested and state.state != "paused":
        text.append(" pausing after this experiment… ", "bold #000000 on #d7af5f")
    sep = ("  ", "")

    def part(name: str, value: str, value_style: str = "bold") -> None:
        text.append(*sep)
        text.append(f"{name} ", "dim")
        text.append(value, value_style)

    part("policy", state.policy, "bold #87d7ff")
    part("exp", str(state.experiment))
    part("elapsed", fmt.elapsed(state.elapsed_s(now)))
    part("kernel", state.task or "-", "bold #d7afff")
    best = state.best_overall
    if state.meaningful is False:
        # The Triton interpreter against eager torch on the CPU compares nothing real: the
        # header shows the gain over the starter kernel (the product of kept speedups) instead.
        part("best", fmt.speedup(best) + (" vs start" if best is not None else ""), "bold #5fd75f")
    else:
        part("best", fmt.speedup(best) + (" vs base" if best is not None else ""), "bold #5fd75f")
    pool = state.pool or {}
    if (fmt.to_float(pool.get("parallel")) or 1) > 1:  # K in flight: only worth a place when K > 1
        part("agents", f"{pool.get('proposing', 0)}/{pool.get('parallel')}")  # writing proposals
        if pool.get("ready"):  # written, being judged or waiting to be recorded
            part("queued", str(pool.get("ready")))
        part("pool", f"{pool.get('workers_busy', 0)}/{pool.get('workers', 1)} busy")
        part("exp/h", f"{fmt.to_float(pool.get('experiments_per_hour')) or 0:.0f}")
        if pool.get("waiting_approval"):
            part("waiting", str(pool.get("waiting_approval")), "bold #ffaf00")
    if state.tokens or state.cost_usd:  # the offline tuner spends nothing: no "0 tok $0.00" to read past
        part("spend", f"{fmt.tokens(state.tokens)} tok {fmt.dollars(state.cost_usd)}")
    text.append(*sep)
    device = fmt.device_label(state.device)
    if state.meaningful is False:
        device += f", {CPU_BASE_NOTE}"
    text.append(device, "#d78700" if device.startswith("CPU") else "#87d7af")
    if state.quick:
        text.append("  quick check: 1st dtype only", "#d7af5f")
    warning = fmt.sandbox_warning(state.device)
    if warning:
        text.append("  ")
        text.append(warning, "bold #ff5f5f" if warning.startswith("NO") else "bold #d78700")
    if attached:
        text.append("  attached", "italic #87afff")
    return text


def activity_line(state: LiveState, now: float) -> Text:
    """What the engine is busy with, how long it has been at it, and how long it took last time;
    in the quiet states, what the state means."""
    text = Text(no_wrap=True, overflow="ellipsis")
    act = state.activity
    if act is not None and state.state not in ("paused", "stopped") and not state.awaiting:
        took = (now - act.since) if act.since is not None else None
        text.append(f" {SPINNER[int(now) % len(SPINNER)]} ", "bold #87d7ff")
        if took is not None:
            text.append(fmt.elapsed(took), "bold")
        if act.expect_s:
            text.append(f" (last {fmt.elapsed(act.expect_s)})", "dim")
        text.append("  ")
        text.append(act.what)
        if state.last_check and act.kind in ("start", "harness"):
            text.append(f" · {state.last_check}", "dim")
        return text
    if state.awaiting and state.pending:
        deadline = fmt.to_float(state.pending.get("deadline"))
        text.append(" waiting for your decision", "bold #ffaf00")
        if deadline is not None and deadline > now:
            text.append(f" · {fmt.elapsed(deadline - now)} left, then the run's timeout action", "dim")
        elif deadline is not None:
            text.append(" · past its deadline: the run's timeout action is due", "dim")
    elif state.state == "paused":
        text.append(" paused between experiments (Resume goes on)", "#d7af5f")
    elif state.state == "stopped":
        text.append(f" stopped{': ' + state.finished if state.finished else ''}", "#d78787")
    return text


class RunHeader(Static):
    DEFAULT_CSS = "RunHeader { height: auto; background: $panel; }"

    def show(self, state: LiveState, now: float, attached: bool = False) -> None:
        self.update(header_text(state, now, attached))
