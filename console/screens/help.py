"""Help: what the screen shows and every key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from console.widgets.footer import KeysFooter

__all__ = ["HelpScreen", "keys_in_force"]

ABOUT = (
    "cbconsole watches the guard that sits between your agents and their tools. A call is denied when "
    "the same call is already duplicateLimit times in the agent's window (kind duplicate), when the agent "
    "has made maxCallsPerAgent calls (kind cap), or when you interrupted the agent (kind interrupted); "
    "with preset recommended also at the third identical call in a row (kind repeat), an A-B-A-B cycle in "
    "its third round (kind cycle), a tool whose calls keep getting the same result (kind stall), the "
    "same call in other words again and again (kind reworded), or the same call a third time after two "
    "identical answers with nothing written between (kind duplicate). An "
    "agent's first deny of a kind is a trip; denies counts every denied call. An agent's status is ok, or "
    "the kind of deny its next call meets. Rows are sorted most dangerous first: a loop caught (duplicate, "
    "repeat, cycle, stall, reworded), cap, interrupted, then whoever is closest to a limit.\n"
)


def keys_in_force(screen: Screen[Any], bindings: Iterable[Binding | tuple[str, ...]]) -> list[tuple[str, str, str]]:
    """Each of `bindings` (then the app's), with the keys that run it now: Textual's active bindings, so the
    user's keymap applied ("—" for one whose keys the focused widget takes, as the filter box takes letters)."""
    keys: dict[str, list[str]] = {}
    for key, active in screen.active_bindings.items():
        if active.binding.id:
            keys.setdefault(active.binding.id, []).append(key)
    listed = [b for b in (*bindings, *screen.app.BINDINGS) if isinstance(b, Binding)]
    return [(",".join(keys.get(b.id or "", [])) or "—", b.description, b.tooltip) for b in listed]


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 100; max-width: 100%; height: 90%; border: thick $primary; background: $surface; padding: 1 2;
    }
    """
    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close", id="help.close", tooltip="Close the help"),
    ]

    def __init__(self, keys: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table(show_header=True, box=None, expand=True)
        table.add_column("key", no_wrap=True, style="bold")
        table.add_column("action", no_wrap=True)
        table.add_column("what it does")
        for key, action, tooltip in self.keys:
            table.add_row(Text(key), Text(action), Text(tooltip))
        with VerticalScroll():
            yield Static(Text(ABOUT))
            yield Static(table)
            close = ", ".join(k for k, active in self.active_bindings.items() if active.binding.id == "help.close")
            yield Static(
                Text(
                    f"\nEvery action is also in the command palette (ctrl+p). {close or 'escape'} closes this.",
                    style="dim",
                ),
                id="help-close",
            )
        yield KeysFooter()

    def action_close(self) -> None:
        self.dismiss(None)
