"""One config schema: `SETTINGS` drives validation, defaults, the console's form and the docs table,
and the dsh plugin's own defaults and ranges are checked against it by running the plugin in Node."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input, Static, Switch

from breaker import changes
from breaker.config import (
    BY_KEY,
    DOCS,
    KEYS,
    PATCH_ONLY_KEYS,
    SETTINGS,
    TABLE_END,
    TABLE_START,
    Config,
    ConfigError,
    Setting,
    check_fields,
    docs_with_settings,
    settings_markdown,
)
from breaker.hook import plugin_dir
from console.screens.config import ConfigScreen, parse_field
from tests.test_config import BAD_VALUES

from .e2e import harnesses
from .tiers import installed

EXTRA = Setting("newLimit", "int", 5, "a setting the code does not have yet", ("engine",), 1, 9)


def docs_table_rows(markdown: str) -> list[str]:
    """The keys of a settings table's rows, in order."""
    return [line.split("`")[1] for line in markdown.splitlines() if line.startswith("| `")]


# -- one table, the same keys everywhere ------------------------------------------------------------


def test_every_part_lists_the_tables_keys_in_its_order():
    keys = [s.key for s in SETTINGS]
    assert list(KEYS) == keys
    assert list(Config().to_mapping()) == keys
    assert [f.name for f in dataclasses.fields(Config) if f.name != "warnings"] == [s.attr for s in SETTINGS]
    assert docs_table_rows(settings_markdown()) == keys
    assert set(BAD_VALUES) == set(keys)  # test_config.py tries bad values of every key


def test_config_defaults_are_the_tables():
    config = Config()
    for s in SETTINGS:
        assert getattr(config, s.attr) == s.default, s.key
    assert Config.from_mapping({}) == config


def test_the_attribute_is_the_key_in_snake_case():
    assert {s.key: s.attr for s in SETTINGS if s.key != s.attr} == {
        "duplicateLimit": "duplicate_limit",
        "duplicateWarn": "duplicate_warn",
        "repeatLimit": "repeat_limit",
        "repeatWarn": "repeat_warn",
        "stallLimit": "stall_limit",
        "stallWarn": "stall_warn",
        "pollGap": "poll_gap",
        "pollLimit": "poll_limit",
        "rewordLimit": "reword_limit",
        "rewordWarn": "reword_warn",
        "unchangedLimit": "unchanged_limit",
        "unchangedWarn": "unchanged_warn",
        "cycleLimit": "cycle_limit",
        "cycleWarn": "cycle_warn",
        "cyclePeriod": "cycle_period",
        "maxCallsPerAgent": "max_calls_per_agent",
        "capWarn": "cap_warn",
        "ignoreArgs": "ignore_args",
        "denyMessage": "deny_message",
        "warnMessage": "warn_message",
        "incidentLog": "incident_log",
        "maxAgents": "max_agents",
        "failClosed": "fail_closed",
        "guardTimeoutMs": "guard_timeout_ms",
        "guardSocket": "guard_socket",
        "otelEvents": "otel_events",
        "interruptCommand": "interrupt_command",
    }


def test_a_setting_added_to_the_table_without_a_config_field_is_named_at_import():
    with pytest.raises(TypeError, match="setting newLimit has no Config field new_limit"):
        check_fields(Config, (*SETTINGS, EXTRA))


def test_a_config_field_missing_from_the_table_is_named():
    with pytest.raises(TypeError, match="Config field interrupt_command is not in SETTINGS"):
        check_fields(Config, SETTINGS[:-1])


def test_a_config_default_or_type_that_differs_from_the_table_is_named():
    window = next(s for s in SETTINGS if s.key == "window")
    other = tuple(dataclasses.replace(s, default=201) if s is window else s for s in SETTINGS)
    with pytest.raises(TypeError, match=r"Config field window is .*SETTINGS says"):
        check_fields(Config, other)
    as_str = tuple(dataclasses.replace(s, kind="str", default="200") if s is window else s for s in SETTINGS)
    with pytest.raises(TypeError, match="Config field window is"):
        check_fields(Config, as_str)


def test_the_config_fields_in_another_order_are_named():
    with pytest.raises(TypeError, match="another order"):
        check_fields(Config, (SETTINGS[1], SETTINGS[0], *SETTINGS[2:]))


@pytest.mark.parametrize(
    ("row", "says"),
    [
        (dict(key="new_limit"), "not camelCase"),
        (dict(kind="float"), "the kind is not one of"),
        (dict(low=9, high=1), "low (9) is above high (1)"),
        (dict(help="two\nlines"), "not one line"),
        (dict(help=""), "not one line"),
        (dict(used_by=()), "used_by"),
        (dict(used_by=("console",)), "used_by"),
    ],
)
def test_a_malformed_setting_row_is_refused_naming_what_is_wrong(row, says):
    fields = dict(key="newLimit", kind="int", default=5, help="h", used_by=("engine",), low=1, high=9) | row
    with pytest.raises(ValueError, match=f"setting '{fields['key']}': .*{re.escape(says)}"):
        Setting(**fields)


def test_patch_only_keys_are_every_key_whose_effect_reaches_outside_the_guard():
    # a program run, a file written anywhere, a port opened, data sent to a collector
    assert PATCH_ONLY_KEYS == ("incidentLog", "metrics", "otelEvents", "interruptCommand")
    assert tuple(changes.FORBIDDEN_KEYS) == PATCH_ONLY_KEYS
    assert all(BY_KEY[k].patch_only and "\n" not in BY_KEY[k].patch_only for k in PATCH_ONLY_KEYS)


# -- validation of every kind names the key, what was expected and what was found ----------------

BAD_BY_KIND: dict[str, list[Any]] = {
    "bool": ["yes", 1, None, [True]],
    "int": ["6", 1.5, True, None],  # plus each setting's own low - 1 and high + 1
    "names": ["a", [""], [1], None, {"a": 1}],
    "str": [None, 3, False, ["x"]],
    "argv": ["kill {agent}", [""], ["{agent}"], [1], None],
    "choice": ["SEED", "", None, 1, ["seed"]],
    "tools": [3, "bash", ["bash"], True],
    "address": [None, 9464, "nope", ":9464", "::1:9464", "host:99999", "a b:1"],
}
GOOD_BY_KIND: dict[str, list[Any]] = {
    "bool": [True, False],
    "int": [],  # each setting's low and high
    "names": [[], ["a", "b_c"]],
    "str": ["", "/x y", "{tool}"],
    "argv": [[], ["kill", "-TERM", "{agent}"], ["tmux", ""]],
    "choice": [],  # each setting's choices
    "tools": [{}, {"bash": {"repeatLimit": 6}}, {"Web-Search": {"maxCalls": 50, "progress": True}}],
    "address": ["", "9464", "127.0.0.1:0", "0.0.0.0:9464", "[::1]:9464", "metrics.internal:9464"],
}


def test_every_kind_has_good_and_bad_values_under_test():
    assert set(BAD_BY_KIND) == set(GOOD_BY_KIND) == {s.kind for s in SETTINGS}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_bad_values_of_each_setting_name_its_key_and_the_tables_expected(setting):
    bad = list(BAD_BY_KIND[setting.kind])
    if setting.kind == "int":
        bad += [setting.low - 1, setting.high + 1]
    for value in bad:
        with pytest.raises(ConfigError) as info:
            Config.from_mapping({setting.key: value}, where="p.yml")
        (problem,) = info.value.problems
        assert (problem.key, problem.expected, problem.where) == (setting.key, setting.expected, "p.yml"), value
        assert problem.found and str(info.value).startswith(f"p.yml: {setting.key}: expected {setting.expected}")


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_good_values_of_each_setting_are_taken_and_round_trip(setting):
    good = list(GOOD_BY_KIND[setting.kind])
    if setting.kind == "int":
        good += [setting.low, setting.high]
    good += setting.choices
    for value in [*good, setting.default]:
        config = Config.from_mapping({setting.key: value})
        if setting.kind == "tools":
            assert config.to_mapping()[setting.key] == (value or {})
        else:
            assert config.to_mapping()[setting.key] == (list(value) if isinstance(value, (list, tuple)) else value)
        assert Config.from_mapping(config.to_mapping()) == config


def test_the_int_ranges_are_the_documented_ones():
    ranges = {s.key: (s.low, s.high) for s in SETTINGS if s.kind == "int"}
    assert ranges == {
        "duplicateLimit": (1, 10**9),
        "duplicateWarn": (0, 10**9),
        "repeatLimit": (0, 10**9),
        "repeatWarn": (0, 10**9),
        "stallLimit": (0, 10**9),
        "stallWarn": (0, 10**9),
        "pollGap": (0, 86_400),
        "pollLimit": (0, 10**9),
        "rewordLimit": (0, 10**9),
        "rewordWarn": (0, 10**9),
        "unchangedLimit": (0, 10**9),
        "unchangedWarn": (0, 10**9),
        "cycleLimit": (0, 10**9),
        "cycleWarn": (0, 10**9),
        "cyclePeriod": (2, 8),
        "window": (1, 100_000),
        "maxCallsPerAgent": (0, 10**9),
        "capWarn": (0, 10**9),
        "maxAgents": (1, 1_000_000),
        "guardTimeoutMs": (1, 60_000),
    }


# -- the docs table ------------------------------------------------------------------------------


def test_the_docs_settings_table_is_the_schemas():
    text = DOCS.read_text(encoding="utf-8")
    assert TABLE_START in text and TABLE_END in text
    assert docs_with_settings(text) == text, (
        f"the settings table in {DOCS} differs from breaker.config.settings_markdown(); "
        "regenerate it with: .venv/bin/python -m breaker.config --write-docs"
    )


def test_the_docs_table_gives_each_settings_default_range_reader_and_help():
    for s in SETTINGS:
        (row,) = [line for line in settings_markdown().splitlines() if line.startswith(f"| `{s.key}` |")]
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[2:4] == [s.expected, ", ".join(s.used_by)] and cells[4].startswith(s.help)
        assert cells[1] == s.default_text if s.default_text else cells[1].startswith("`")
    assert "`[todo_write, ask_user_question, exit_plan_mode]`" in settings_markdown()
    assert "an integer from 1 to 60,000" in settings_markdown()


def test_a_setting_added_to_the_table_gets_a_docs_row():
    table = settings_markdown((*SETTINGS, EXTRA))
    assert docs_table_rows(table)[-1] == "newLimit"
    assert "| `newLimit` | `5` | an integer from 1 to 9 | engine | a setting the code does not have yet |" in table
    text = DOCS.read_text(encoding="utf-8")
    assert "newLimit" in docs_with_settings(text, (*SETTINGS, EXTRA)) and "newLimit" not in text


def test_a_long_default_is_spelled_out_below_the_table():
    deny = next(s for s in SETTINGS if s.key == "denyMessage")
    assert deny.default_text and f"```text\n{deny.default}\n```" in settings_markdown()


def test_docs_without_the_markers_are_an_error_not_a_silent_append():
    with pytest.raises(ValueError, match="markers are missing"):
        docs_with_settings("# Configuration\n")


def test_write_docs_puts_the_table_between_the_markers(tmp_path, monkeypatch):
    from breaker import config

    stale = tmp_path / "configuration.md"
    stale.write_text(f"# Configuration\n\n{TABLE_START}\n| old |\n{TABLE_END}\n\nafter\n", encoding="utf-8")
    monkeypatch.setattr(config, "DOCS", stale)
    assert config.main(["--write-docs"]) == 0
    assert stale.read_text(encoding="utf-8") == (
        f"# Configuration\n\n{TABLE_START}\n{settings_markdown()}{TABLE_END}\n\nafter\n"
    )


# -- the console's form ----------------------------------------------------------------------------


class FormApp(App[None]):
    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__()
        self.values = values

    def on_mount(self) -> None:
        self.push_screen(ConfigScreen(self.values, "/tmp/cordis.patch.yml"))


@asynccontextmanager
async def open_form() -> AsyncIterator[tuple[Pilot[None], ConfigScreen]]:
    """The config form over the defaults, in a bare app (the form needs no guard to show and validate)."""
    app = FormApp(Config().to_mapping())
    async with app.run_test(size=(120, 80)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, ConfigScreen)
        yield pilot, app.screen


async def test_the_form_shows_every_setting_with_the_schemas_input_and_help():
    from textual.widgets import Select, TextArea  # the inputs of the kinds a line of text does not fit
    from textual.widgets.select import InvalidSelectValueError

    widget_of = {"bool": Switch, "choice": Select, "tools": TextArea}  # every other kind: an Input
    async with open_form() as (_pilot, form):
        assert [w.id for w in form.query(".help")] == [f"h-{s.key}" for s in SETTINGS]
        for s in SETTINGS:
            field = form.query_one(f"#f-{s.key}")
            assert type(field) is widget_of.get(s.kind, Input), s.key
            if isinstance(field, Input):
                assert field.type == ("integer" if s.kind == "int" else "text"), s.key
            assert field.disabled == s.patch_only, s.key
            help_text = str(form.query_one(f"#h-{s.key}", Static).content)
            assert help_text.startswith(s.help) and ", ".join(s.used_by) in help_text, s.key
        # What the form shows reads back as the same config: nothing changed, nothing to save.
        assert form.values() == Config().to_mapping()
        assert form.validate_form() == {}
        # A choice offers exactly the schema's words (a word it does not offer cannot be set).
        for s in SETTINGS:
            if s.kind == "choice":
                select = form.query_one(f"#f-{s.key}", Select)
                for choice in s.choices:
                    select.value = choice
                    assert select.value == choice
                with pytest.raises(InvalidSelectValueError):
                    select.value = "not-a-" + s.key


async def test_the_form_names_a_bad_value_with_the_schemas_expected():
    from textual.widgets import TextArea

    async with open_form() as (pilot, form):
        timeout = next(s for s in SETTINGS if s.key == "guardTimeoutMs")
        form.query_one("#f-guardTimeoutMs", Input).value = str(timeout.high + 1)
        await pilot.pause()
        problem = str(form.query_one("#p-guardTimeoutMs", Static).content)
        assert problem == f"expected {timeout.expected}, found {timeout.high + 1} (an integer)"
        form.query_one("#f-guardTimeoutMs", Input).value = "750"
        await pilot.pause()
        assert form.validate_form() == {"guardTimeoutMs": 750}
        # A per-tool override is named down to its tool and key, with the expected of the setting it follows.
        repeat = next(s for s in SETTINGS if s.key == "repeatLimit")
        form.query_one("#f-tools", TextArea).text = "bash: {repeatLimit: -1}"
        await pilot.pause()
        problem = str(form.query_one("#p-tools", Static).content)
        assert problem == f"tools.bash.repeatLimit: expected {repeat.expected}, found -1 (an integer)"
        assert form.validate_form() is None


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        ("int", "10_000", 10_000),
        ("int", "1,000", 1_000),
        ("int", "many", "many"),
        ("names", "a, b ,c", ["a", "b", "c"]),
        ("names", "[a, 'b,c']", ["a", "b,c"]),
        ("argv", '[tmux, send-keys, -t, "{agent}", C-c]', ["tmux", "send-keys", "-t", "{agent}", "C-c"]),
        ("names", "", []),
        ("str", " x ", " x "),
    ],
)
def test_the_form_parses_what_is_typed_by_the_settings_kind(kind, text, value):
    assert parse_field(kind, text) == value


# -- the dsh plugin's own defaults and ranges ----------------------------------------------------

# readSettings' result field for each key the plugin reads (its own names, in guard.mjs).
PLUGIN_FIELDS = {
    "enabled": "enabled",
    "failClosed": "failClosed",
    "guardTimeoutMs": "timeoutMs",
    "guardSocket": "socket",
}
PLUGIN_DEFAULT_SOCKET = "/run/default/guard.sock"  # what guardSocket "" means: here, $CBCONSOLE_SOCKET

RUN_SETTINGS = textwrap.dedent("""
    import { readSettings } from %(guard)s
    const env = { CBCONSOLE_SOCKET: %(socket)s }
    const read = new Set()
    readSettings(new Proxy({}, { get(target, key) { if (typeof key === 'string') read.add(key) } }), env)
    const cases = JSON.parse(process.argv[2]).map((config) => {
      const warnings = []
      return { settings: readSettings(config, env, (w) => warnings.push(w)), warnings }
    })
    console.log(JSON.stringify({ read: [...read].sort(), cases }))
""")


@pytest.fixture(scope="module")
def node() -> Path:
    return installed(harnesses.ensure_node22) / "node"


def plugin_cases(s: Setting) -> list[tuple[Any, Any]]:
    """(value in the row, what the plugin should make of it) for one setting, from the schema alone."""
    default = PLUGIN_DEFAULT_SOCKET if s.key == "guardSocket" else s.default
    if s.kind == "bool":
        return [(True, True), (False, False), ("yes", default), (1, default), (None, default)]
    if s.kind == "int":
        edges = [(s.low, s.low), (s.high, s.high), (s.low - 1, default), (s.high + 1, default)]
        return [*edges, (s.low + 0.5, default), (str(s.high), default), (True, default), (None, default)]
    if s.kind == "str":
        return [("/y/guard.sock", "/y/guard.sock"), ("", default), (7, default), (False, default), (None, default)]
    raise AssertionError(f"the plugin reads {s.key}, of kind {s.kind}, which this test does not know yet")


@pytest.mark.e2e  # Node 22, from npm into the cache
def test_the_dsh_plugin_reads_the_schemas_keys_with_its_defaults_and_ranges(node, tmp_path):
    plugin_settings = [s for s in SETTINGS if "dsh plugin" in s.used_by]
    assert {s.key for s in plugin_settings} == set(PLUGIN_FIELDS)
    cases = [(s, value, want) for s in plugin_settings for value, want in plugin_cases(s)]
    script = tmp_path / "settings.mjs"
    guard = (Path(plugin_dir()) / "guard.mjs").as_uri()
    script.write_text(RUN_SETTINGS % {"guard": json.dumps(guard), "socket": json.dumps(PLUGIN_DEFAULT_SOCKET)})
    configs = [{}] + [{s.key: value} for s, value, _ in cases]
    out = subprocess.run(
        [str(node), str(script), json.dumps(configs)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)

    # It reads exactly the keys the schema says it reads: a key added on one side only fails here.
    assert result["read"] == sorted(PLUGIN_FIELDS)
    # With nothing set, every default is the schema's.
    defaults, *rest = result["cases"]
    assert defaults["warnings"] == []
    assert defaults["settings"] == {
        PLUGIN_FIELDS[s.key]: PLUGIN_DEFAULT_SOCKET if s.key == "guardSocket" else s.default for s in plugin_settings
    }
    # Each value: taken if the schema takes it, else the default with one warning in the schema's words.
    for (s, value, want), got in zip(cases, rest, strict=True):
        assert got["settings"][PLUGIN_FIELDS[s.key]] == want, (s.key, value)
        if not _invalid(s, value):
            assert got["warnings"] == [], (s.key, value)
        else:
            assert len(got["warnings"]) == 1 and got["warnings"][0].startswith(f"{s.key}: expected {s.expected}"), (
                s.key,
                value,
                got["warnings"],
            )


def _invalid(s: Setting, value: Any) -> bool:
    try:
        Config.from_mapping({s.key: value})
    except ConfigError:
        return True
    return False
