"""No workspace here: offer to create one, and say what it would run on and with."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option


PROFILE_OPTION = "profile"


class FirstRunScreen(Screen[list[str] | dict | None]):
    """Dismisses with the starter tasks to create, ``{"profile": MODEL}`` (tasks from the user's model:
    profiled, then its top ops at their real shapes), or None."""

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
            options = [Option("rmsnorm + softmax starters (the demo pair)", id="demo"),
                       Option("from my model: profile it, then tasks for its hottest ops at its real shapes…",
                              id=PROFILE_OPTION)]
            if starters:
                options.append(Option(f"every starter: {', '.join(starters)}", id="all"))
            options += [Option(f"only {name}", id=f"one:{name}") for name in starters]
            yield OptionList(*options, id="fr-options")
            yield Input(placeholder="model: gpt2 | llama | bert | resnet | vit | t5 (or -tiny), hf:ClassName, "
                                    "file.py:factory, or a KernelBench file.py", id="fr-model")
            yield Static(Text("", "dim"), id="fr-model-help")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#fr-model", Input).display = False
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
        if choice == PROFILE_OPTION:
            box = self.query_one("#fr-model", Input)
            box.display = True
            box.focus()
            self.query_one("#fr-model-help", Static).update(Text(
                "Enter: profile it here (autokernel-tui profile MODEL), then make tasks of its top ops "
                "(init --from-profile --top 5). Esc: back.", "dim"))
        elif choice == "demo":
            self.dismiss(["rmsnorm", "softmax"])
        elif choice == "all":
            self.dismiss(list(starters))
        elif choice.startswith("one:"):
            self.dismiss([choice[4:]])

    def on_input_submitted(self, event: Input.Submitted) -> None:
        model = event.value.strip()
        if model:
            self.dismiss({"profile": model})

    def action_cancel(self) -> None:
        box = self.query_one("#fr-model", Input)
        if box.display:  # back from the model prompt to the list
            box.display = False
            self.query_one("#fr-model-help", Static).update("")
            self.query_one(OptionList).focus()
            return
        self.dismiss(None)
