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

from breaker.config import SETTINGS, Config, ConfigError, Kind, Setting

__all__ = ["ConfigScreen", "help_line", "parse_field"]

# How a list is typed into one line of text, by kind (the setting's own help comes from SETTINGS).
_LIST_INPUT = {"names": "comma-separated, or [a, b]", "argv": 'a list, e.g. [tmux, send-keys, -t, "{agent}", C-c]'}


def help_line(setting: Setting) -> str:
    """The line under a setting's field: its help from the schema, how to type it, who reads it."""
    parts = [setting.help]
    if setting.kind in _LIST_INPUT:
        parts.append(_LIST_INPUT[setting.kind])
    parts.append(", ".join(setting.used_by))
    if setting.patch_only:
        parts.append("set only in the patch file")
    return " · ".join(parts)


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) and "," not in v and v == v.strip() and v for v in value):
            return ", ".join(value)
        return yaml.safe_dump(list(value), default_flow_style=True, width=10**6).strip()
    return "" if value is None else str(value)


def parse_field(kind: Kind, text: str) -> Any:
    """What the user typed, as the value the config expects (invalid input passes through for the
    validator to name it)."""
    if kind == "int":
        try:
            return int(text.strip().replace("_", "").replace(",", ""))
        except ValueError:
            return text
    if kind in ("names", "argv"):
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
    ConfigScreen .help { color: $text-muted; height: auto; }
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
        self.original = {s.key: values.get(s.key, s.default) for s in SETTINGS}
        self.target = target
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("Circuit-breaker config", style="bold"), id="heading")
            for setting in SETTINGS:
                key = setting.key
                # A patch-only key runs a program: the guard refuses it over a socket, so it is shown, not edited.
                disabled = self.readonly or setting.patch_only
                with Horizontal(classes="row"):
                    yield Label(key, classes="name")
                    if setting.kind == "bool":
                        yield Switch(value=bool(self.original[key]), id=f"f-{key}", disabled=disabled)
                    else:
                        yield Input(
                            value=_show(self.original[key]),
                            id=f"f-{key}",
                            type="integer" if setting.kind == "int" else "text",
                            disabled=disabled,
                        )
                yield Static(Text(help_line(setting)), classes="help", id=f"h-{key}")
                yield Static("", classes="problem", id=f"p-{key}")
            where = f"Saved to {self.target}" if self.target else "No patch layer to save to (memory only)"
            yield Static(Text(where), id="where")
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Save (ctrl+s)", id="save", variant="primary", disabled=self.readonly)

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for setting in SETTINGS:
            key = setting.key
            if setting.kind == "bool":
                out[key] = self.query_one(f"#f-{key}", Switch).value
            else:
                out[key] = parse_field(setting.kind, self.query_one(f"#f-{key}", Input).value)
        return out

    def validate_form(self) -> dict[str, Any] | None:
        """Show each problem under its field; the changed keys if all is well."""
        values = self.values()
        for setting in SETTINGS:
            self.query_one(f"#p-{setting.key}", Static).update("")
        try:
            Config.from_mapping(values)
        except ConfigError as exc:
            for problem in exc.problems:
                if problem.key in self.original:
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
