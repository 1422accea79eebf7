"""One line that says where the run stands: state, policy, experiment, clock, kernel, best, spend, device."""

from __future__ import annotations

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


def header_text(state: LiveState, now: float, attached: bool = False) -> Text:
    label, style = STATE_STYLE.get(state.state, (state.state.upper(), "bold reverse"))
    if state.awaiting:
        label, style = STATE_STYLE["awaiting_approval"]
    text = Text(no_wrap=False)
    text.append(f" {label} ", style)
    sep = ("  ", "")

    def part(name: str, value: str, value_style: str = "bold") -> None:
        text.append(*sep)
        text.append(f"{name} ", "dim")
        text.append(value, value_style)

    part("policy", state.policy, "bold #87d7ff")
    part("exp", str(state.experiment))
    part("elapsed", fmt.elapsed(now - state.started_at) if state.started_at else fmt.elapsed(None))
    part("kernel", state.task or "-", "bold #d7afff")
    part("best", fmt.speedup(state.best_overall), "bold #5fd75f")
    part("spend", f"{fmt.tokens(state.tokens)} tok {fmt.dollars(state.cost_usd)}")
    text.append(*sep)
    device = fmt.device_label(state.device)
    text.append(device, "#d78700" if device.startswith("CPU") else "#87d7af")
    warning = fmt.sandbox_warning(state.device)
    if warning:
        text.append("  ")
        text.append(warning, "bold #ff5f5f" if warning.startswith("NO") else "bold #d78700")
    if attached:
        text.append("  attached", "italic #87afff")
    return text


class RunHeader(Static):
    DEFAULT_CSS = "RunHeader { height: auto; background: $panel; }"

    def show(self, state: LiveState, now: float, attached: bool = False) -> None:
        self.update(header_text(state, now, attached))
