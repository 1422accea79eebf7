"""Every steering and navigation key, by id; users remap them in ``[keys]`` of the config.

``settings.keys`` maps an action id (the first column) to a key string in
Textual's syntax ("p", "ctrl+s", "space", "f5", several as "a,enter").
"""

from __future__ import annotations

from dataclasses import dataclass

from autokernel_tui.errors import ConfigError


@dataclass(frozen=True)
class KeySpec:
    id: str
    key: str
    action: str
    description: str
    help: str
    show: bool = True
    short: str = ""  # the footer's label on a narrow screen (80 columns), when shorter than description


# The live screen's steering keys: one key each, in the footer and in the command palette.
STEERING = (
    KeySpec("pause", "p", "toggle_pause", "Pause", "pause the loop after the current step, or resume it"),
    KeySpec("approve", "a", "approve", "Approve", "keep the candidate awaiting approval (commit stays on the branch)"),
    KeySpec("veto", "v", "veto", "Veto", "discard the candidate awaiting approval (its commit is kept under refs/autokernel)"),
    KeySpec("skip", "n", "skip", "Next kernel", "stop working on this kernel and move to the next one in the ranking",
            short="Next"),
    KeySpec("policy", "o", "cycle_policy", "Policy", "switch the approval policy: manual -> auto -> threshold"),
    KeySpec("stop", "x", "stop", "Stop", "stop the run after the current experiment"),
)
NAVIGATION = (
    KeySpec("review", "r", "review", "Review", "open review: every experiment of every run"),
    KeySpec("sort", "s", "sort", "Sort", "sort the results table by the column under the cursor (again: reverse)"),
    KeySpec("detach", "d", "detach", "Detach", "leave this run going headless and close the app", show=False),
    KeySpec("help", "question_mark", "help", "Help", "this screen"),
    KeySpec("quit", "q", "quit_app", "Quit", "quit: asks whether to stop the run or leave it running headless"),
)
REVIEW = (
    KeySpec("filter_status", "f", "filter_status", "Status filter", "cycle the status filter: all, keep, discard, fail, ...",
            short="Status"),
    KeySpec("filter_kernel", "k", "filter_kernel", "Kernel filter", "cycle the kernel filter", short="Kernel"),
    KeySpec("revert", "u", "revert", "Revert", "revert the selected kept experiment (the engine makes a new commit and row)"),
    KeySpec("view", "t", "next_view", "View", "switch the detail pane: diff, harness report, agent reasoning"),
    KeySpec("close_review", "escape", "close", "Back", "leave review"),
)
ALL = STEERING + NAVIGATION + REVIEW
IDS = {spec.id for spec in ALL}
RESUME = "Resume"  # the pause key's label while a pause is asked for or in force
SHORT = {spec.id: spec.short for spec in ALL if spec.short}


def keymap(user_keys: dict[str, str]) -> dict[str, str]:
    """Validate ``settings.keys`` against our binding ids; unknown ids are a config error."""
    unknown = sorted(set(user_keys) - IDS)
    if unknown:
        raise ConfigError(f"[keys]: unknown action {', '.join(unknown)} (known: {', '.join(sorted(IDS))})")
    return dict(user_keys)


def display_key(spec: KeySpec, user_keys: dict[str, str]) -> str:
    key = user_keys.get(spec.id, spec.key).split(",")[0]
    return {"question_mark": "?", "escape": "esc", "space": "space"}.get(key, key)
