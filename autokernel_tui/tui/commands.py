"""The command palette knows every steering action by name (ctrl+p)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from autokernel_tui.tui import keys


class SteeringCommands(Provider):
    def _commands(self):
        screen = self.screen
        specs = keys.STEERING + keys.NAVIGATION + (keys.REVIEW if "review" in type(screen).__name__.lower() else ())
        user_keys = getattr(self.app, "user_keys", {})
        for spec in specs:
            if screen.check_action(spec.action, ()) is False or not hasattr(screen, f"action_{spec.action}"):
                continue
            yield (f"{spec.description} ({keys.display_key(spec, user_keys)})", spec.help,
                   partial(screen.run_action, spec.action))

    async def discover(self) -> Hits:
        for name, help_text, run in self._commands():
            yield DiscoveryHit(name, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, run in self._commands():
            score = max(matcher.match(name), matcher.match(help_text) * 0.8)
            if score > 0:
                yield Hit(score, matcher.highlight(name), run, help=help_text)
