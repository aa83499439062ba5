"""The config form: every key of the circuit-breaker row, validated as you type, saved to the patch layer."""

from __future__ import annotations

from typing import Any

import yaml
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch, TextArea

from breaker.config import BY_KEY, PRESETS, SETTINGS, TOOL_KEYS, Config, ConfigError, Kind, Problem, Setting
from console.inert import inert_lines
from console.widgets.cells import plain
from console.widgets.footer import KeysFooter

__all__ = ["ConfigScreen", "help_line", "parse_field", "preset_note", "show_tools"]

# How a value is typed, by kind (the setting's own help comes from SETTINGS).
_HOW_TO_TYPE = {
    "names": "comma-separated, or [a, b]",
    "argv": 'a list, e.g. [tmux, send-keys, -t, "{agent}", C-c]',
    "tools": "YAML: one tool a line, bash: {repeatLimit: 6}; keys " + ", ".join(TOOL_KEYS),
}


def help_line(setting: Setting) -> str:
    """The line under a setting's field: its help from the schema, how to type it, who reads it."""
    parts = [setting.help]
    if setting.kind in _HOW_TO_TYPE:
        parts.append(_HOW_TO_TYPE[setting.kind])
    parts.append(", ".join(setting.used_by))
    if setting.patch_only:
        parts.append("set only in the patch file")
    return " · ".join(parts)


def _show(value: Any) -> str:
    """A field's text. A list holding a control or invisible format character (an exempt tool named by an agent)
    is shown as YAML with `\\x9B`, `\\u202E` escapes: drawn inert, and read back as the same list."""
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) and "," not in v and v == v.strip() and v and v.isprintable() for v in value):
            return ", ".join(value)
        return yaml.safe_dump(list(value), default_flow_style=True, width=10**6).strip()
    return "" if value is None else str(value)  # the user's own text (the patch file's): shown as it reads back


def show_tools(tools: Any) -> str:
    """Per-tool overrides as the editor shows them: YAML, one tool a line (`bash: {repeatLimit: 6}`); ""
    for none. Tool names are quoted where YAML needs it, so the text reads back as the same mapping."""
    if not tools:
        return ""
    if isinstance(tools, tuple):  # normalised: ((tool, ((key, value), ...)), ...)
        tools = {tool: dict(overrides) for tool, overrides in tools}
    text = yaml.safe_dump(tools, default_flow_style=None, sort_keys=False, allow_unicode=True, width=10**6).strip()
    if inert_lines(text) != text:  # YAML keeps a bidi override or a zero-width space as it is: escape them all
        text = yaml.safe_dump(tools, default_flow_style=None, sort_keys=False, width=10**6).strip()
    return text


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
    if kind == "tools":
        if not text.strip():
            return {}
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text
    return text


def _yaml_error(text: str) -> str | None:
    """Why `text` is not YAML (with where), or None if it is."""
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = getattr(exc, "problem", None) or "not YAML"
        return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else str(what)
    return None


def _same(setting: Setting, a: Any, b: Any) -> bool:
    """Whether two values of `setting` are the same once normalised (a list and a tuple, a mapping and its
    normalised form, are)."""
    return bool(setting.check(a, []) == setting.check(b, []))


def preset_note(preset: str, kept: dict[str, Any]) -> str:
    """What choosing `preset` does to the other keys, and which keys keep the value set for them."""
    sets = PRESETS.get(preset, {})
    if sets:
        values = ", ".join(f"{key} {_word(value)}" for key, value in sets.items())
        note = f"{preset} sets {values}"
    else:
        note = f"{preset} sets nothing: every key starts from its own default (the original plugin's rules)"
    if kept:
        note += "; set in a patch layer, so kept: " + ", ".join(f"{k} {_word(v)}" for k, v in kept.items())
    return note


def _word(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class ConfigScreen(ModalScreen[dict[str, Any] | None]):
    """Returns the changed keys (camelCase) or None when cancelled.

    Choosing a preset moves the fields that follow it (those not set to another value) to its values, and
    a note under it says which keys it sets; saving sends the preset and only the keys the operator
    changed, so the others keep following the preset in the patch layer."""

    DEFAULT_CSS = """
    ConfigScreen { align: center middle; }
    ConfigScreen > #dialog {
        width: 100; max-width: 100%; height: 90%; border: thick $primary; background: $surface; padding: 0 2;
    }
    ConfigScreen #heading { height: auto; margin-top: 1; }
    ConfigScreen #fields { height: 1fr; }
    ConfigScreen .row { height: auto; margin-top: 1; }
    ConfigScreen .name { width: 20; padding-top: 1; text-style: bold; }
    ConfigScreen Input { width: 1fr; }
    ConfigScreen Select { width: 1fr; }
    ConfigScreen TextArea { width: 1fr; height: 6; }
    ConfigScreen .help { color: $text-muted; height: auto; }
    ConfigScreen .note { color: $accent; height: auto; }
    ConfigScreen .problem { color: $error; height: auto; }
    ConfigScreen #where { color: $text-muted; margin-top: 1; }
    ConfigScreen #buttons { height: auto; align-horizontal: right; margin: 1 0 0 0; }
    ConfigScreen Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="config.cancel", tooltip="Close without saving"),
        Binding("ctrl+s", "save", "Save", id="config.save", tooltip="Validate, write the patch layer, apply live"),
    ]

    def __init__(
        self, values: dict[str, Any], target: str | None, readonly: bool = False, title: str | None = None
    ) -> None:
        super().__init__()
        self.title_text = title  # over several guards: which guard's config this is
        given = {s.key: values.get(s.key, s.default) for s in SETTINGS}
        try:
            config = Config.from_mapping(given)
        except ConfigError:  # not the guard's (always valid) values: shown as given, every key counted as set
            self.original = given
            self.explicit = set(given)
        else:
            self.original = config.to_mapping()
            # The keys whose values differ from their preset's: set in a layer, so a new preset leaves them be.
            self.explicit = set(config.to_mapping(only_changed=True)) - {"preset"}
        preset = self.original.get("preset")
        default = str(BY_KEY["preset"].default)
        self.preset: str = preset if isinstance(preset, str) and preset in PRESETS else default  # the fields follow it
        self.target = target
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        # The heading and the buttons stay in view; the ~30 fields scroll between them.
        with Vertical(id="dialog"):
            heading = Text("Circuit-breaker config", style="bold")
            if self.title_text:
                heading.append(" — ")
                heading.append_text(plain(self.title_text))
            yield Static(heading, id="heading")
            with VerticalScroll(id="fields"):
                yield from self._fields()
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Save (ctrl+s)", id="save", variant="primary", disabled=self.readonly)
        yield KeysFooter()

    def _fields(self) -> ComposeResult:
        """Every setting: its field, its help, its note and its problem; where saving writes."""
        for setting in SETTINGS:
            key = setting.key
            # A patch-only key runs a program: the guard refuses it over a socket, so it is shown, not edited.
            disabled = self.readonly or setting.patch_only
            value = self.original[key]
            with Horizontal(classes="row"):
                yield Label(key, classes="name")
                if setting.kind == "bool":
                    yield Switch(value=bool(value), id=f"f-{key}", disabled=disabled)
                elif setting.kind == "choice":
                    yield Select(
                        [(Text(choice), choice) for choice in setting.choices],
                        value=value if value in setting.choices else setting.default,
                        allow_blank=False,
                        id=f"f-{key}",
                        disabled=disabled,
                    )
                elif setting.kind == "tools":
                    yield TextArea(
                        show_tools(value),
                        soft_wrap=False,
                        id=f"f-{key}",
                        disabled=disabled,
                        placeholder="no overrides — e.g. bash: {repeatLimit: 6}",
                    )
                else:
                    yield Input(
                        value=_show(value),
                        id=f"f-{key}",
                        type="integer" if setting.kind == "int" else "text",
                        disabled=disabled,
                    )
            yield Static(Text(help_line(setting)), classes="help", id=f"h-{key}")
            if setting.kind == "choice":
                yield Static(Text(self._note(self.preset)), classes="note", id=f"n-{key}")
            yield Static("", classes="problem", id=f"p-{key}")
        where = (
            Text("Saved to ") + plain(self.target) if self.target else Text("No patch layer to save to (memory only)")
        )
        yield Static(where, id="where")

    # -- the fields ---------------------------------------------------------------------------------

    def field_text(self, setting: Setting) -> str:
        """What a text field holds (an Input's value, the tools editor's text)."""
        if setting.kind == "tools":
            return self.query_one(f"#f-{setting.key}", TextArea).text
        return self.query_one(f"#f-{setting.key}", Input).value

    def field_value(self, setting: Setting) -> Any:
        key = setting.key
        if setting.kind == "bool":
            return self.query_one(f"#f-{key}", Switch).value
        if setting.kind == "choice":
            return self.query_one(f"#f-{key}", Select).value
        return parse_field(setting.kind, self.field_text(setting))

    def set_field(self, setting: Setting, value: Any) -> None:
        key = setting.key
        if setting.kind == "bool":
            self.query_one(f"#f-{key}", Switch).value = bool(value)
        elif setting.kind == "choice":
            self.query_one(f"#f-{key}", Select).value = value
        elif setting.kind == "tools":
            self.query_one(f"#f-{key}", TextArea).text = show_tools(value)
        else:
            self.query_one(f"#f-{key}", Input).value = _show(value)

    def values(self) -> dict[str, Any]:
        """Every field's value as the config expects it (camelCase keys, in table order)."""
        return {setting.key: self.field_value(setting) for setting in SETTINGS}

    # -- presets ------------------------------------------------------------------------------------

    def under(self, preset: str) -> dict[str, Any]:
        """Every key as it is with `preset` chosen and nothing else changed: the preset's value, or the
        value set for a key that has one."""
        defaults = Config.with_preset(preset).to_mapping()
        return {k: self.original[k] if k in self.explicit else v for k, v in defaults.items()} | {"preset": preset}

    def _note(self, preset: str) -> str:
        kept = {k: self.original[k] for k in PRESETS.get(preset, {}) if k in self.explicit}
        return preset_note(preset, kept)

    def choose_preset(self, preset: str) -> None:
        """Move the fields that follow the preset (showing its value, untouched) to `preset`'s values."""
        if preset == self.preset or preset not in PRESETS:
            return
        before, after = self.under(self.preset), self.under(preset)
        for setting in SETTINGS:
            key = setting.key
            if key == "preset" or _same(setting, before[key], after[key]):
                continue
            if _same(setting, self.field_value(setting), before[key]):
                self.set_field(setting, after[key])
        self.preset = preset
        self.query_one("#n-preset", Static).update(Text(self._note(preset)))

    # -- validation ---------------------------------------------------------------------------------

    def validate_form(self) -> dict[str, Any] | None:
        """Show each problem under its field; the changed keys if all is well."""
        values = self.values()
        problems: list[Problem] = []
        for setting in SETTINGS:
            if setting.kind == "tools" and isinstance(values[setting.key], str):
                error = _yaml_error(self.field_text(setting))
                if error is not None:
                    problems.append(Problem(setting.key, setting.expected, f"text that is not YAML: {error}"))
        config = None
        if not problems:
            try:
                config = Config.from_mapping(values)
            except ConfigError as exc:
                problems = exc.problems
        shown: dict[str, list[str]] = {setting.key: [] for setting in SETTINGS}
        for problem in problems:
            # A per-tool override's problem is named down to its key (tools.bash.repeatLimit) under the editor.
            field = problem.key.split(".", 1)[0]
            if field in shown:
                head = f"{problem.key}: " if problem.key != field else ""
                shown[field].append(f"{head}expected {problem.expected}, found {problem.found}")
        for key, lines in shown.items():
            self.query_one(f"#p-{key}", Static).update(Text(inert_lines("\n".join(lines))))
        if config is None:
            return None
        # Changed: what differs from the keys as they are under the chosen preset. A key that only follows
        # the preset is not sent, so the patch layer keeps it following the preset.
        base = self.under(self.preset)
        changes = {"preset": config.preset} if config.preset != self.original["preset"] else {}
        for key, value in config.to_mapping().items():
            if key != "preset" and not _same(BY_KEY[key], value, base[key]):
                changes[key] = value
        return changes

    def on_input_changed(self, event: Input.Changed) -> None:
        self.validate_form()

    def on_switch_changed(self, event: Switch.Changed) -> None:
        self.validate_form()

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        self.validate_form()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "f-preset" and isinstance(event.value, str):
            self.choose_preset(event.value)
        self.validate_form()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "save" and self.readonly else True  # greyed in the footer when read-only

    def action_save(self) -> None:
        if self.readonly:
            return
        changes = self.validate_form()
        if changes is not None:
            self.dismiss(changes)

    def action_cancel(self) -> None:
        self.dismiss(None)
