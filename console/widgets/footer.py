"""The footer: the screen's own keys, with its help and quit in view at any width."""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer

__all__ = ["KEEP", "KeysFooter"]

KEEP = frozenset({"help", "app.quit", "quit", "back", "close", "cancel", "save", "apply"})
"""The actions a footer never lets go of: how to get help, how to get out, how to save a form."""


def _width(key: Widget) -> int:
    """The cells a key takes in the footer (not compact: a blank each side of the key, one after its description)."""
    return cell_len(getattr(key, "key_display", "")) + cell_len(getattr(key, "description", "")) + 3


def _is_key(widget: Widget) -> bool:
    """A key of the screen's (Textual's FooterKey, not exported), not the command palette's."""
    return hasattr(widget, "key_display") and not widget.has_class("-command-palette")


class KeysFooter(Footer):
    """Textual's footer, except when the screen's keys do not fit its width: then the last ones give way, but never
    help, quit or a form's save and cancel (`KEEP`). A key that gives way is still in help (`?`) and the command
    palette (ctrl+p). At 80 columns the main screen shows interrupt, config, exempt, override, help and quit."""

    _composed_for = -1  # the width the keys were last fitted to

    def compose(self) -> ComposeResult:
        shown = list(super().compose())
        width = self.size.width
        self._composed_for = width
        keys = [w for w in shown if _is_key(w)]
        if not width:
            yield from shown  # not laid out yet: fitted once it has a width (on_resize)
            return
        # The palette's key is docked right, behind a separator and a blank of padding.
        room = width - sum(_width(w) + 2 for w in shown if w.has_class("-command-palette"))
        while sum(map(_width, keys)) > room:
            giving_way = next((k for k in reversed(keys) if getattr(k, "action", "") not in KEEP), None)
            if giving_way is None:
                break
            keys.remove(giving_way)
        yield from (w for w in shown if w in keys or not _is_key(w))

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._composed_for and self._bindings_ready:
            self.call_after_refresh(self.recompose)
