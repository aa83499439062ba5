"""The config form: every key of the circuit-breaker row, validated as you type, saved to the patch layer."""

from __future__ import annotations

from typing import Any

import yaml
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, Switch

from breaker.config import KEYS, Config, ConfigError

__all__ = ["ConfigScreen", "parse_field"]

_DEFAULTS = Config()
HELP = {
    "enabled": "master switch",
    "duplicateLimit": "deny after this many identical calls in the window",
    "window": "how many recent calls each agent remembers",
    "maxCallsPerAgent": "lifetime calls per agent (0 = no cap)",
    "exempt": "tools the guard ignores (comma-separated, or [a, b])",
    "only": "if set, the guard judges only these tools",
    "ignoreArgs": "argument names left out when comparing calls",
    "denyMessage": "the deny text; {tool} {count} {limit} {kind} {agent}",
    "incidentLog": "append-only JSONL of first denies (empty = off)",
    "maxAgents": "how many agents are tracked at once",
    "failClosed": "dsh plugin: deny tool calls while the guard is unreachable",
    "guardTimeoutMs": "dsh plugin: how long a tool call waits for the guard (ms)",
    "guardSocket": "dsh plugin: the guard's socket (empty = the default path)",
    "interruptCommand": 'argv run on an interrupt, e.g. [tmux, send-keys, -t, "{agent}", C-c]',
}


def _kind(key: str) -> str:
    value = getattr(_DEFAULTS, KEYS[key])
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, tuple):
        return "list"
    return "str"


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) and "," not in v and v == v.strip() and v for v in value):
            return ", ".join(value)
        return yaml.safe_dump(list(value), default_flow_style=True, width=10**6).strip()
    return "" if value is None else str(value)


def parse_field(kind: str, text: str) -> Any:
    """What the user typed, as the value the config expects (invalid input passes through for the
    validator to name it)."""
    if kind == "int":
        try:
            return int(text.strip().replace("_", "").replace(",", ""))
        except ValueError:
            return text
    if kind == "list":
        stripped = text.strip()
        if stripped.startswith("["):
            try:
                return yaml.safe_load(stripped)
            except yaml.YAMLError:
                return text
        return [part.strip() for part in stripped.split(",") if part.strip()]
    return text


class ConfigScreen(ModalScreen[dict[str, Any] | None]):
    """Returns the changed keys (camelCase) or None when cancelled."""

    DEFAULT_CSS = """
    ConfigScreen { align: center middle; }
    ConfigScreen > VerticalScroll {
        width: 100; height: 90%; border: thick $primary; background: $surface; padding: 0 2;
    }
    ConfigScreen .row { height: auto; margin-top: 1; }
    ConfigScreen .name { width: 20; padding-top: 1; text-style: bold; }
    ConfigScreen Input { width: 1fr; }
    ConfigScreen .help { color: $text-muted; height: 1; }
    ConfigScreen .problem { color: $error; height: auto; }
    ConfigScreen #where { color: $text-muted; margin-top: 1; }
    ConfigScreen #buttons { height: auto; align-horizontal: right; margin: 1 0; }
    ConfigScreen Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="config.cancel", tooltip="Close without saving"),
        Binding("ctrl+s", "save", "Save", id="config.save", tooltip="Validate, write the patch layer, apply live"),
    ]

    def __init__(self, values: dict[str, Any], target: str | None, readonly: bool = False) -> None:
        super().__init__()
        self.original = {k: values.get(k, getattr(_DEFAULTS, a)) for k, a in KEYS.items()}
        self.target = target
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("Circuit-breaker config", style="bold"), id="heading")
            for key in KEYS:
                kind = _kind(key)
                with Horizontal(classes="row"):
                    yield Label(key, classes="name")
                    if kind == "bool":
                        yield Switch(value=bool(self.original[key]), id=f"f-{key}", disabled=self.readonly)
                    else:
                        yield Input(
                            value=_show(self.original[key]),
                            id=f"f-{key}",
                            type="integer" if kind == "int" else "text",
                            disabled=self.readonly,
                        )
                yield Static(Text(HELP.get(key, "")), classes="help")
                yield Static("", classes="problem", id=f"p-{key}")
            where = f"Saved to {self.target}" if self.target else "No patch layer to save to (memory only)"
            yield Static(Text(where), id="where")
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Save (ctrl+s)", id="save", variant="primary", disabled=self.readonly)

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in KEYS:
            kind = _kind(key)
            if kind == "bool":
                out[key] = self.query_one(f"#f-{key}", Switch).value
            else:
                out[key] = parse_field(kind, self.query_one(f"#f-{key}", Input).value)
        return out

    def validate_form(self) -> dict[str, Any] | None:
        """Show each problem under its field; the changed keys if all is well."""
        values = self.values()
        for key in KEYS:
            self.query_one(f"#p-{key}", Static).update("")
        try:
            Config.from_mapping(values)
        except ConfigError as exc:
            for problem in exc.problems:
                if problem.key in KEYS:
                    self.query_one(f"#p-{problem.key}", Static).update(
                        Text(f"expected {problem.expected}, found {problem.found}")
                    )
            return None
        original = {k: list(v) if isinstance(v, tuple) else v for k, v in self.original.items()}
        return {k: v for k, v in values.items() if v != original[k]}

    def on_input_changed(self, event: Input.Changed) -> None:
        self.validate_form()

    def on_switch_changed(self, event: Switch.Changed) -> None:
        self.validate_form()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def action_save(self) -> None:
        if self.readonly:
            return
        changes = self.validate_form()
        if changes is not None:
            self.dismiss(changes)

    def action_cancel(self) -> None:
        self.dismiss(None)
