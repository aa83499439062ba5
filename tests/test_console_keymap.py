"""The user's keymap: every kind of error named by file, line and id; the good entries applied; help shows them."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.widgets import DataTable

from console.app import keymap_scopes
from console.keymap import MAX_BYTES, keymap_path, load_keymap, parse_keymap
from console.screens.config import ConfigScreen
from console.screens.confirm import ConfirmScreen
from console.screens.help import HelpScreen
from console.widgets.agents import AgentsTable
from console.widgets.calls import CallTail
from tests.test_console_pilot import SIZE, app_for, loop, select
from tests.waits import eventually_async

FILE = Path("/home/op/.config/cbconsole/keymap.yaml")


def parse(text: str):
    return parse_keymap(text, FILE, keymap_scopes())


def only_error(text: str) -> str:
    loaded = parse(text)
    assert len(loaded.errors) == 1, loaded.errors
    return loaded.errors[0]


# -- the file --------------------------------------------------------------------------------------


def test_the_file_is_under_xdg_config_home_or_dot_config(tmp_path, monkeypatch):
    assert keymap_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "cbconsole" / "keymap.yaml"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert keymap_path({"XDG_CONFIG_HOME": ""}) == tmp_path / "home" / ".config" / "cbconsole" / "keymap.yaml"


def test_a_missing_file_is_no_keymap_and_no_error(tmp_path):
    loaded = load_keymap(tmp_path / "keymap.yaml", keymap_scopes())
    assert (loaded.keys, loaded.errors) == ({}, [])


def test_an_empty_file_is_no_keymap_and_no_error():
    assert (parse("# nothing yet\n").keys, parse("").errors) == ({}, [])


def test_good_entries_are_normalised_for_textual():
    loaded = parse('main.interrupt: k\nhelp.close: "escape,?"\nconfig.save: "ctrl+s, f2"\nmain.filter: "/"\n')
    assert loaded.errors == []
    assert loaded.keys == {
        "main.interrupt": "k",
        "help.close": "escape,question_mark",
        "config.save": "ctrl+s,f2",
        "main.filter": "slash",
    }


def test_swapping_two_keys_is_not_a_clash():
    loaded = parse("main.interrupt: z\nmain.freeze: i\n")
    assert (loaded.keys, loaded.errors) == ({"main.interrupt": "z", "main.freeze": "i"}, [])


# -- one test per kind of error --------------------------------------------------------------------


def test_a_file_over_the_size_cap_is_ignored_with_its_size_named(tmp_path):
    path = tmp_path / "keymap.yaml"
    path.write_text("# padding\n" * (MAX_BYTES // 10 + 1) + "main.interrupt: k\n")
    loaded = load_keymap(path, keymap_scopes())
    assert loaded.keys == {} and loaded.errors == [f"{path}: more than 65,536 bytes, too big for a keymap; ignored"]


def test_a_file_that_is_not_utf8_is_ignored(tmp_path):
    path = tmp_path / "keymap.yaml"
    path.write_bytes(b"main.interrupt: \xff\n")
    [error] = load_keymap(path, keymap_scopes()).errors
    assert error.startswith(f"{path}: not UTF-8")


def test_text_that_is_not_yaml_names_its_line_and_column():
    error = only_error("main.interrupt: k\nmain.freeze: [z\n")
    assert error.startswith(f"{FILE}:3:1: not YAML:") and error.endswith("ignored")


def test_yaml_that_is_not_a_mapping_says_what_it_found():
    assert only_error("- main.interrupt\n- k\n") == f"{FILE}:1: expected binding ids mapped to keys, found a list"


def test_an_unknown_binding_id_gets_the_nearest_id_as_a_hint():
    error = only_error("main.interrupt: k\nmain.interupt: j\n")
    assert error == f"{FILE}:2: main.interupt: no such binding (did you mean main.interrupt?)"
    assert parse("main.interrupt: k\nmain.interupt: j\n").keys == {"main.interrupt": "k"}  # the good one applies


def test_an_id_that_is_not_a_string_is_named():
    assert only_error("12: k\n") == f"{FILE}:1: expected a binding id such as main.interrupt, found an integer"


@pytest.mark.parametrize(
    ("value", "found"),
    [("1", "an integer (quote it: '1')"), ("on", "true/false (quote it: 'on')"), ("", "nothing"), ("[a, b]", "a list")],
)
def test_a_value_that_is_not_a_string_is_named_with_what_was_found(value, found):
    error = only_error(f"main.freeze: {value}\n")
    assert error == f'{FILE}:1: main.freeze: expected keys as a string such as "ctrl+r" or "f5,r", found {found}'


def test_a_key_with_an_unknown_modifier_names_the_modifier():
    error = only_error("\nmain.mark: ctrl+shoft+z\n")
    assert error == (
        f"{FILE}:2: main.mark: 'ctrl+shoft+z' is not a key: 'shoft' is not a modifier "
        "(ctrl, shift, alt, meta, super, hyper)"
    )


def test_a_key_name_textual_does_not_know_gets_the_nearest_name():
    hint = "(did you mean 'escape'?)"
    assert only_error("main.help: Escape\n") == f"{FILE}:1: main.help: 'Escape' is not a key Textual knows {hint}"
    assert "'ctrl+pagedwn' is not a key Textual knows (did you mean 'ctrl+pagedown'?)" in only_error(
        "main.help: ctrl+pagedwn\n"
    )
    assert "'hyphen_minus' is not a key" in only_error("main.help: hyphen_minus\n")  # Textual calls it minus


def test_one_bad_key_in_a_list_skips_the_whole_entry():
    loaded = parse('main.freeze: "z,f99"\n')
    assert loaded.keys == {}
    assert loaded.errors == [f"{FILE}:1: main.freeze: 'f99' is not a key Textual knows (did you mean 'f9'?)"]


def test_an_empty_key_in_a_list_is_named():
    assert "an empty key" in only_error('main.freeze: "z,,y"\n')


def test_an_id_given_twice_keeps_the_first_and_names_both_lines():
    loaded = parse("main.reset: j\nmain.freeze: z\nmain.reset: k\n")
    assert loaded.keys == {"main.reset": "j", "main.freeze": "z"}
    assert loaded.errors == [f"{FILE}:3: main.reset: given again (first on line 1); ignored"]


def test_a_key_another_binding_of_the_screen_keeps_is_a_clash():
    loaded = parse("main.freeze: i\n")  # i is still main.interrupt's
    assert loaded.keys == {}
    assert loaded.errors == [f"{FILE}:1: main.freeze: 'i' is already main.interrupt on the main screen; not applied"]


def test_two_entries_giving_one_key_on_one_screen_both_fail():
    loaded = parse("main.interrupt: k\nmain.freeze: k\n")
    assert loaded.keys == {}
    assert loaded.errors == [
        f"{FILE}:1: main.interrupt: 'k' is already main.freeze on the main screen; not applied",
        f"{FILE}:2: main.freeze: 'k' is already main.interrupt on the main screen; not applied",
    ]


def test_a_clash_that_skipping_another_entry_brings_back_is_found_too():
    # main.interrupt clashes and keeps i, so main.help's i now clashes with it.
    loaded = parse("main.interrupt: k\nmain.freeze: k\nmain.help: i\n")
    assert loaded.keys == {}
    assert f"{FILE}:3: main.help: 'i' is already main.interrupt on the main screen; not applied" in loaded.errors


def test_the_apps_keys_and_the_tables_keys_count_as_taken():
    assert "'ctrl+q' is already app.quit on the main screen" in only_error("main.freeze: ctrl+q\n")
    assert "'pageup' is already a widget's page up key on the main screen" in only_error("main.exempt: pageup\n")
    assert "'enter' is already main.open on the main screen" in only_error("main.exempt: enter\n")
    assert "'end' is already a widget's follow key on the agent screen" in only_error("agent.reset: end\n")
    assert "'ctrl+s' is already config.save on the config screen" in only_error("config.cancel: ctrl+s\n")


def test_the_same_key_on_two_screens_is_not_a_clash():
    assert parse("config.save: i\n").errors == []


def test_untrusted_text_in_errors_is_kept_as_text():
    error = only_error("'[@click=app.quit]x[/]': k\n")
    assert "[@click=app.quit]x[/]: no such binding" in error


# -- the docs --------------------------------------------------------------------------------------


def test_the_docs_list_every_binding_id_with_its_default_keys():
    doc = (Path(__file__).parent.parent / "docs" / "console.md").read_text()
    section = doc.split("## Your keys", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([\w.]+)` \| `([^`]+)` \| (.+) \|$", section, re.MULTILINE)
    expected, seen = [], set()
    for bindings in keymap_scopes().values():
        for b in bindings:
            if b.id and b.id not in seen:
                seen.add(b.id)
                expected.append((b.id, b.key, b.tooltip))
    assert documented == expected


def test_every_binding_of_the_console_has_a_unique_dotted_id_and_a_tooltip():
    ids: dict[str, Binding] = {}
    for bindings in keymap_scopes().values():
        for b in bindings:
            if any(b is t for t in (*DataTable.BINDINGS, *AgentsTable.BINDINGS, *CallTail.BINDINGS)):
                continue  # the tables' own keys and the call tail's (moving the cursor): without ids, never rebound
            assert b.id and re.fullmatch(r"(app|main|agent|override|config|confirm|help)\.[a-z_]+", b.id), b
            assert b.tooltip, b
            assert ids.setdefault(b.id, b) is b, f"{b.id} is given to two bindings"
    assert len(ids) == 35


# -- the console -----------------------------------------------------------------------------------


def write_keymap(text: str) -> Path:
    path = keymap_path()  # XDG_CONFIG_HOME is a temporary directory (tests/conftest.py)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def keymap_notices(app) -> list:
    return [n for n in app._notifications if n.title == "Some keys were not applied"]


async def test_a_rebound_interrupt_key_interrupts_and_the_old_key_does_not(guard):
    write_keymap("main.interrupt: k\n")
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "rebound", 2)
        await select(pilot, app, "rebound")
        # Keys are handled in order: if i still interrupted, its dialog would swallow the ? and help never opens.
        await pilot.press("i", "question_mark")
        await eventually_async(lambda: isinstance(app.screen, HelpScreen), what="help, over no dialog", pilot=pilot)
        assert not any(isinstance(s, ConfirmScreen) for s in app.screen_stack)
        await pilot.press("escape")
        await eventually_async(lambda: not isinstance(app.screen, HelpScreen), pilot=pilot)
        await pilot.press("k")
        await eventually_async(
            lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation from k", pilot=pilot
        )
        assert "rebound" in str(app.screen.query_one("#body").content)
        assert keymap_notices(app) == []


async def test_a_keymap_with_errors_shows_them_all_in_one_notice_and_applies_the_good_entries(guard):
    path = write_keymap("main.interupt: x\nmain.edit_config: f2\nmain.freeze: 1\nmain.help: Escape\n")
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await eventually_async(lambda: bool(app.state.values), what="the guard's config", pilot=pilot)
        [notice] = keymap_notices(app)
        assert notice.markup is False and notice.severity == "warning"
        lines = notice.message.splitlines()
        assert [line.split(": ")[0:2] for line in lines] == [
            [f"{path}:1", "main.interupt"],
            [f"{path}:3", "main.freeze"],
            [f"{path}:4", "main.help"],
        ]
        assert app.keymap_errors == lines
        await pilot.press("e", "question_mark")  # e no longer opens the form, so ? opens help
        await eventually_async(lambda: isinstance(app.screen, HelpScreen), what="help, not the form", pilot=pilot)
        assert not any(isinstance(s, ConfigScreen) for s in app.screen_stack)
        await pilot.press("escape")
        await eventually_async(lambda: not isinstance(app.screen, HelpScreen), pilot=pilot)
        await pilot.press("f2")
        await eventually_async(lambda: isinstance(app.screen, ConfigScreen), what="the form from f2", pilot=pilot)


async def test_help_shows_the_rebound_keys_not_the_defaults(guard):
    write_keymap('main.interrupt: k\nmain.freeze: "ctrl+f,f9"\nhelp.close: "escape,h"\n')
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await eventually_async(lambda: isinstance(app.screen, HelpScreen), pilot=pilot)
        keys = {action: key for key, action, _tip in app.screen.keys}
        assert keys["Interrupt"] == "k" and keys["Freeze"] == "ctrl+f,f9"
        assert keys["Config"] == "e" and keys["Help"] == "question_mark"  # the others keep their defaults
        assert "escape, h closes this." in str(app.screen.query_one("#help-close").content)
        await pilot.press("h")
        await eventually_async(lambda: not isinstance(app.screen, HelpScreen), what="h closed help", pilot=pilot)
