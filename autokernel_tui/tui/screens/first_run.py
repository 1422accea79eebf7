"""No workspace here: offer to create one, and say what it would run on and with."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option


class FirstRunScreen(Screen[list[str] | None]):
    """Dismisses with the starter tasks to create, or None."""

    BINDINGS = [Binding("escape,q", "cancel", "Quit", id="quit")]

    def __init__(self, workspace: Path, info: dict) -> None:
        super().__init__()
        self.workspace = Path(workspace)
        self.info = info  # {"starters": [...], "agent": str, "device": str|None}

    def compose(self) -> ComposeResult:
        starters = self.info.get("starters") or []
        with Vertical(id="first-run") as box:
            box.border_title = "autokernel-tui: no workspace here"
            yield Static(Text.assemble(("Folder  ", "dim"), (str(self.workspace), "bold")))
            yield Static(Text.assemble(("Device  ", "dim"), (self.info.get("device") or "checking…", "bold")), id="fr-device")
            yield Static(Text.assemble(("Agent   ", "dim"), (self.info.get("agent") or "", "bold")))
            yield Static(Text("\nCreate a workspace here (a git repository with kernels/<task>/):", "bold"))
            options = [Option("rmsnorm + softmax starters (the demo pair)", id="demo")]
            if starters:
                options.append(Option(f"every starter: {', '.join(starters)}", id="all"))
            options += [Option(f"only {name}", id=f"one:{name}") for name in starters]
            yield OptionList(*options, id="fr-options")
            yield Static(Text("To start from your model instead: autokernel-tui profile MODEL, then "
                              "autokernel-tui init --from-profile PROFILE.json", "dim"))
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        if not self.info.get("device"):
            self._probe_device()

    @work(thread=True)
    def _probe_device(self) -> None:
        from autokernel_tui.tui.environment import device_label
        label = device_label()
        self.app.call_from_thread(self._show_device, label)

    def _show_device(self, label: str) -> None:
        self.info["device"] = label
        self.query_one("#fr-device", Static).update(Text.assemble(("Device  ", "dim"), (label, "bold")))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        choice = event.option.id or ""
        starters = self.info.get("starters") or []
        if choice == "demo":
            self.dismiss(["rmsnorm", "softmax"])
        elif choice == "all":
            self.dismiss(list(starters))
        elif choice.startswith("one:"):
            self.dismiss([choice[4:]])

    def action_cancel(self) -> None:
        self.dismiss(None)
