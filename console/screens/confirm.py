"""A modal that names what an action will touch and asks before doing it."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from console.widgets.footer import KeysFooter

__all__ = ["Choice", "ConfirmScreen"]


class Choice:
    """One button; `key` (a single key) chooses it from the keyboard too."""

    def __init__(self, value: str, label: str, variant: str = "default", key: str = "") -> None:
        self.value, self.label, self.variant, self.key = value, label, variant, key


class ConfirmScreen(ModalScreen[str | None]):
    """Returns the chosen value, or None when dismissed (escape)."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 72; height: auto; max-height: 80%; padding: 1 2;
        border: thick $warning; background: $surface;
    }
    ConfirmScreen #title { text-style: bold; margin-bottom: 1; }
    ConfirmScreen #body { margin-bottom: 1; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; }
    ConfirmScreen Button { margin-left: 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="confirm.cancel", tooltip="Close without doing anything")]

    def __init__(self, title: str, body: Text, choices: list[Choice]) -> None:
        super().__init__()
        self.title_text, self.body, self.choices = title, body, choices

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.title_text), id="title")
            yield Static(self.body, id="body")
            with Horizontal():
                for choice in self.choices:
                    label = f"{choice.label} ({choice.key})" if choice.key else choice.label
                    yield Button(label, id=f"choice-{choice.value}", variant=choice.variant)  # type: ignore[arg-type]
        yield KeysFooter()  # the dialog's own keys, not the screen's beneath it

    def on_mount(self) -> None:
        self.query(Button).first().focus()  # the safe choice: enter alone never does the destructive thing

    def on_key(self, event: events.Key) -> None:
        for choice in self.choices:
            if choice.key and event.key == choice.key:
                event.stop()
                self.dismiss(choice.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss((event.button.id or "").removeprefix("choice-") or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
