"""Screens whose footer fits the terminal: on a narrow one (80 columns) the footer goes compact with the
short labels of keys.SHORT, so the keys at its end ("? Help", "q Quit") stay on screen."""

from __future__ import annotations

import dataclasses

from textual.widgets import Footer

from autokernel_tui.tui import keys


class FittedFooter:
    """Mix into a Screen with HORIZONTAL_BREAKPOINTS giving "-narrow" and one Footer."""

    PALETTE_WHEN_NARROW = True  # the "^p palette" key on the footer's right, when narrow too

    def fit_footer(self) -> None:
        narrow = self.has_class("-narrow")  # type: ignore[attr-defined]
        footer = self.query_one(Footer)  # type: ignore[attr-defined]
        if footer.compact != narrow:
            footer.compact = narrow
            footer.show_command_palette = self.PALETTE_WHEN_NARROW or not narrow
            self.refresh_bindings()  # type: ignore[attr-defined]

    def on_resize(self) -> None:
        self.fit_footer()

    def binding_description(self, binding_id: str, description: str, narrow: bool = False) -> str:
        """The label a key has in the footer now."""
        return keys.SHORT.get(binding_id, description) if narrow else description

    @property
    def active_bindings(self):
        bindings = super().active_bindings  # type: ignore[misc]
        narrow = self.has_class("-narrow")  # type: ignore[attr-defined]
        for key, active in bindings.items():
            binding = active.binding
            label = self.binding_description(binding.id or "", binding.description, narrow)
            if label != binding.description:
                bindings[key] = active._replace(binding=dataclasses.replace(binding, description=label))
        return bindings
