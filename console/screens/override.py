"""The form for one agent's own limits: its cap and its duplicate limit, over the config's."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from breaker.config import AGENT_LIMITS, BY_KEY
from console.widgets.cells import plain
from console.widgets.footer import KeysFooter

__all__ = ["LABELS", "OverrideScreen", "parse_limits"]

LABELS = {
    "maxCallsPerAgent": "Calls it may make in all (its cap; 0 = no cap)",
    "duplicateLimit": "Identical calls in its window before a deny (every tool)",
}


def parse_limits(texts: Mapping[str, str], current: Mapping[str, int]) -> tuple[dict[str, int | None], dict[str, str]]:
    """What the form asks for: per key, a new value, or None to take the agent's override off (an empty box);
    only keys that change. The second value: per key, what is wrong with its box."""
    limits: dict[str, int | None] = {}
    errors: dict[str, str] = {}
    for key in AGENT_LIMITS:
        text = texts.get(key, "").strip().replace(",", "").replace("_", "")
        setting = BY_KEY[key]
        if not text:
            if key in current:
                limits[key] = None
            continue
        try:
            value = int(text)
        except ValueError:
            errors[key] = f"{key} must be {setting.expected}, or empty for the config's"
            continue
        if not setting.low <= value <= setting.high:
            errors[key] = f"{key} must be {setting.expected}, or empty for the config's"
            continue
        if current.get(key) != value:
            limits[key] = value
    return limits, errors


class OverrideScreen(ModalScreen[dict[str, int | None] | None]):
    """Returns the limits to send (see `parse_limits`), or None when dismissed."""

    DEFAULT_CSS = """
    OverrideScreen { align: center middle; }
    OverrideScreen > Vertical {
        width: 76; height: auto; max-height: 90%; padding: 1 2; border: thick $primary; background: $surface;
    }
    OverrideScreen #title { text-style: bold; margin-bottom: 1; }
    OverrideScreen .label { margin-top: 1; }
    OverrideScreen .error { color: $error; height: auto; }
    OverrideScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    OverrideScreen Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="override.cancel", tooltip="Close without changing anything"),
        Binding("ctrl+s", "apply", "Apply", id="override.apply", tooltip="Give the agent these limits"),
    ]

    def __init__(self, agent: str, current: Mapping[str, int], config: Mapping[str, object], calls: int = 0) -> None:
        super().__init__()
        self.agent, self.current, self.config, self.calls = agent, dict(current), config, calls

    def compose(self) -> ComposeResult:
        with Vertical():
            title = Text("Limits of its own for ")
            title.append_text(plain(self.agent, style="bold"))
            yield Static(title, id="title")
            yield Static(
                Text(
                    f"It has made {self.calls:,} calls. An empty box means the config's value. The config is not "
                    "changed; a reset of the agent takes these off; a restart keeps them."
                )
            )
            for key in AGENT_LIMITS:
                yield Static(Text(f"{LABELS[key]} — config: {self.config.get(key)}"), classes="label")
                value = self.current.get(key)
                yield Input(
                    "" if value is None else str(value),
                    placeholder=f"{self.config.get(key)} (the config's)",
                    id=f"limit-{key}",
                    type="integer",
                )
                yield Static("", id=f"error-{key}", classes="error")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Apply (ctrl+s)", id="apply", variant="warning")
        yield KeysFooter()  # the form's own keys, not the screen's beneath it

    def on_mount(self) -> None:
        self.query(Input).first().focus()

    def texts(self) -> dict[str, str]:
        return {key: self.query_one(f"#limit-{key}", Input).value for key in AGENT_LIMITS}

    def action_apply(self) -> None:
        limits, errors = parse_limits(self.texts(), self.current)
        for key in AGENT_LIMITS:
            self.query_one(f"#error-{key}", Static).update(Text(errors.get(key, "")))
        if not errors:
            self.dismiss(limits)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.action_apply()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.action_apply()
        else:
            self.dismiss(None)
