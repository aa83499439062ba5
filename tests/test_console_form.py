"""The config form's preset select and per-tool editor, in a bare app (the form needs no guard to show,
validate and compute what it would send; test_console_pilot.py saves through a real guard)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input, Select, Static, Switch, TextArea

from breaker.config import BY_KEY, PRESETS, Config
from console.screens.config import ConfigScreen, parse_field, show_tools

RECOMMENDED = PRESETS["recommended"]


class FormApp(App[None]):
    def __init__(self, values: dict[str, Any], readonly: bool = False) -> None:
        super().__init__()
        self.values = values
        self.readonly = readonly
        self.result: list[dict[str, Any] | None] = []

    def on_mount(self) -> None:
        self.push_screen(ConfigScreen(self.values, "/tmp/cordis.patch.yml", self.readonly), self.result.append)


@asynccontextmanager
async def open_form(values: dict[str, Any], readonly: bool = False) -> AsyncIterator[tuple[Pilot[None], ConfigScreen]]:
    app = FormApp(values, readonly)
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, ConfigScreen)
        yield pilot, app.screen


def shown(form: ConfigScreen, key: str) -> Any:
    """What a field shows, as the config reads it."""
    return form.field_value(BY_KEY[key])


def text_of(form: ConfigScreen, selector: str) -> str:
    return str(form.query_one(selector, Static).content)


async def choose(pilot: Pilot[None], form: ConfigScreen, preset: str) -> None:
    """Pick `preset` from the preset select with the keyboard, as an operator does."""
    select = form.query_one("#f-preset", Select)
    select.focus()
    await pilot.press("enter")  # opens the list
    await pilot.pause()
    await pilot.press("home", *["down"] * BY_KEY["preset"].choices.index(preset), "enter")
    await pilot.pause()
    assert select.value == preset


# -- the preset ---------------------------------------------------------------------------------------


async def test_choosing_a_preset_moves_the_fields_that_follow_it_and_sends_only_the_preset():
    async with open_form(Config().to_mapping()) as (pilot, form):
        assert "seed sets nothing" in text_of(form, "#n-preset")
        await choose(pilot, form, "recommended")
        for key, value in RECOMMENDED.items():
            assert shown(form, key) == value, key
        note = text_of(form, "#n-preset")
        assert note.startswith("recommended sets ") and all(f"{key} " in note for key in RECOMMENDED)
        # The fields only follow the preset: saving sends the preset, so the patch layer keeps them following it.
        assert form.validate_form() == {"preset": "recommended"}
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert form.app.result == [{"preset": "recommended"}]  # type: ignore[attr-defined]


async def test_a_key_the_operator_edits_is_sent_and_stays_when_the_preset_changes_again():
    async with open_form(Config().to_mapping()) as (pilot, form):
        await choose(pilot, form, "recommended")
        form.query_one("#f-repeatLimit", Input).value = "5"
        await pilot.pause()
        assert form.validate_form() == {"preset": "recommended", "repeatLimit": 5}
        await choose(pilot, form, "seed")
        assert shown(form, "repeatLimit") == 5  # the operator's, not the preset's
        assert shown(form, "cycleLimit") == BY_KEY["cycleLimit"].default  # back to the seed's
        assert form.validate_form() == {"repeatLimit": 5}


async def test_a_key_set_in_the_layer_keeps_its_value_and_the_note_says_so():
    values = Config.from_mapping({"repeatLimit": 6}).to_mapping()
    async with open_form(values) as (pilot, form):
        await choose(pilot, form, "recommended")
        assert shown(form, "repeatLimit") == 6
        assert shown(form, "cycleLimit") == RECOMMENDED["cycleLimit"]
        assert "set in a patch layer, so kept: repeatLimit 6" in text_of(form, "#n-preset")
        assert form.validate_form() == {"preset": "recommended"}


async def test_leaving_the_recommended_preset_for_the_seed_moves_its_keys_back():
    values = Config.with_preset("recommended").to_mapping()
    async with open_form(values) as (pilot, form):
        assert form.validate_form() == {}
        await choose(pilot, form, "seed")
        for key in RECOMMENDED:
            assert shown(form, key) == BY_KEY[key].default, key
        assert form.validate_form() == {"preset": "seed"}


# -- the per-tool editor -----------------------------------------------------------------------------

TOOLS = {"bash": {"repeatLimit": 6, "progress": True}, "web_search": {"maxCalls": 50}, "we: ird [x]": {"repeatWarn": 1}}


async def test_the_tools_editor_shows_one_tool_a_line_and_reads_back_the_same():
    values = Config.from_mapping({"tools": TOOLS}).to_mapping()
    async with open_form(values) as (_pilot, form):
        text = form.query_one("#f-tools", TextArea).text
        assert text.splitlines() == [
            "bash: {repeatLimit: 6, progress: true}",
            "web_search: {maxCalls: 50}",
            "'we: ird [x]': {repeatWarn: 1}",  # quoted where YAML needs it
        ]
        assert shown(form, "tools") == TOOLS
        assert form.validate_form() == {}


async def test_an_edited_override_is_sent_as_the_whole_mapping():
    async with open_form(Config().to_mapping()) as (pilot, form):
        form.query_one("#f-tools", TextArea).text = "{bash: {repeatLimit: 6}, web_search: {maxCalls: 50}}"
        await pilot.pause()
        assert text_of(form, "#p-tools") == ""
        assert form.validate_form() == {"tools": {"bash": {"repeatLimit": 6}, "web_search": {"maxCalls": 50}}}
        form.query_one("#f-tools", TextArea).text = ""  # no overrides again: nothing changed
        await pilot.pause()
        assert form.validate_form() == {}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "bash: {repeatLimit: -1}",
            f"tools.bash.repeatLimit: expected {BY_KEY['repeatLimit'].expected}, found -1 (an integer)",
        ),
        (
            "bash: {maxCalls: many}",
            f"tools.bash.maxCalls: expected {BY_KEY['maxCallsPerAgent'].expected}, found 'many' (a string)",
        ),
        ("bash: {progress: 2}", "tools.bash.progress: expected true or false, found 2 (an integer)"),
        ("bash: {nope: 1}", "tools.bash.nope: expected one of duplicateLimit, "),
        ("bash: 6", "tools.bash: expected a mapping of settings, found 6 (an integer)"),
        ("[bash]", f"expected {BY_KEY['tools'].expected}, found ['bash'] (a list)"),
        ("bash: {repeatLimit: 6", f"expected {BY_KEY['tools'].expected}, found text that is not YAML: "),
    ],
)
async def test_a_bad_override_is_named_down_to_its_tool_and_key(text, problem):
    async with open_form(Config().to_mapping()) as (pilot, form):
        form.query_one("#f-tools", TextArea).text = text
        await pilot.pause()
        assert text_of(form, "#p-tools").startswith(problem)
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert form.app.screen is form and form.app.result == []  # type: ignore[attr-defined]


async def test_two_bad_overrides_are_both_named():
    async with open_form(Config().to_mapping()) as (pilot, form):
        form.query_one("#f-tools", TextArea).text = "bash: {repeatLimit: -1}\nread: {nope: 2}"
        await pilot.pause()
        lines = text_of(form, "#p-tools").splitlines()
        assert [line.split(":")[0] for line in lines] == ["tools.bash.repeatLimit", "tools.read.nope"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("", {}),
        ("  \n", {}),
        ("bash: {repeatLimit: 6}\nread: {maxCalls: 9}", {"bash": {"repeatLimit": 6}, "read": {"maxCalls": 9}}),
        ("{bash: {repeatLimit: 6}}", {"bash": {"repeatLimit": 6}}),
        ("bash: {repeatLimit: 6", "bash: {repeatLimit: 6"),  # not YAML: passed on for the validator to name
    ],
)
def test_the_tools_editor_parses_yaml(text, value):
    assert parse_field("tools", text) == value


def test_show_tools_reads_back_as_the_same_mapping_for_any_tool_name():
    import yaml

    tools = {"[red]": {"maxCalls": 1}, "a: b": {"progress": False}, "- x": {"repeatLimit": 2}, "ünï": {}}
    assert yaml.safe_load(show_tools(tools)) == tools
    assert show_tools({}) == show_tools(()) == ""


# -- read-only -----------------------------------------------------------------------------------------


async def test_a_readonly_form_cannot_change_the_preset_or_the_overrides():
    async with open_form(Config().to_mapping(), readonly=True) as (pilot, form):
        assert form.query_one("#f-preset", Select).disabled
        assert form.query_one("#f-tools", TextArea).disabled
        assert form.query_one("#f-enabled", Switch).disabled
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert form.app.screen is form
