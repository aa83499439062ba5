"""Nothing an agent sends reaches the operator's terminal live: control characters (C0, C1), bidi overrides and
other invisible format characters in ids, tools, args, harness names and guard names are drawn as visible escapes.

The escaping function over every code point; then the console against real guards, every screen's rendered text
checked (with the last-line filter on, as shipped, and off, so that each place escapes what it draws); the
clipboard and the incident report; and the real console in a real terminal."""

from __future__ import annotations

import asyncio
import html
import re
import shlex
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from rich.segment import Segment
from textual.app import App
from textual.color import Color
from textual.widgets import Input

from breaker.client import GuardClient
from breaker.protocol import StateFrame
from console.app import CBConsole, InertLines
from console.inert import ESCAPED_CATEGORIES, escape_char, inert, inert_json, inert_lines, unsafe
from console.report import reports_dir
from console.screens.agent import AgentScreen
from console.screens.config import ConfigScreen, parse_field
from console.screens.confirm import ConfirmScreen
from console.screens.override import OverrideScreen
from console.session import FleetMember, FleetSession, GuardOptions, OwnGuard
from console.widgets.agents import AgentsTable
from console.widgets.detail import AgentDetail
from console.widgets.header import GuardHeader
from console.widgets.keys import KeysTable
from tests.conftest import ROOT, Tmux
from tests.test_console_pilot import text_of
from tests.test_console_snapshots import STATES, T0, NoGuard, frame
from tests.tiers import need_tools
from tests.waits import eventually_async

# -- the function ----------------------------------------------------------------------------------------------

EVERY_CHAR = [chr(c) for c in range(sys.maxunicode + 1)]
BIDI = [*map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)), "\u200e", "\u200f", "\u061c"]
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\ufeff", "\u2028", "\u2029", "\u00ad", "\u2060", "\U000e0041"]


def test_every_control_and_format_character_is_escaped_and_nothing_else_is():
    escaped = [c for c in EVERY_CHAR if inert(c) != c]
    assert escaped == [c for c in EVERY_CHAR if unicodedata.category(c) in ESCAPED_CATEGORIES]
    assert len(escaped) > 2000
    for c in escaped:
        shown = inert(c)
        assert shown.isascii() and shown.isprintable(), repr(c)
    for c in [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0))]:  # C0, DEL, C1
        assert inert(c) == f"\\x{ord(c):02x}"
    for c in [*BIDI, *INVISIBLE]:
        assert inert(c) == f"<U+{ord(c):04X}>"


def test_what_is_escaped_is_the_categories_named_and_printable_text_is_returned_as_it_is():
    assert {unicodedata.category(c) for c in EVERY_CHAR if unsafe(c)} == ESCAPED_CATEGORIES
    for text in ["session-1", "[red]x[/]", "naïve 中文 🤖", "a b", "\u00a0nbsp", ""]:
        assert inert(text) == text
    assert inert("id\x1b]0;PWNED\x07\x9b2J\u202eabc") == "id\\x1b]0;PWNED\\x07\\x9b2J<U+202E>abc"
    assert escape_char("\ud800") == "<U+D800>"  # a lone surrogate: a terminal's UTF-8 encoder would refuse it
    assert inert_lines("line one \x9b\nline two \u202e") == "line one \\x9b\nline two <U+202E>"


def test_a_report_keeps_the_data_and_holds_no_raw_control_or_format_character():
    escaped = [c for c in EVERY_CHAR if unsafe(c) and unicodedata.category(c) != "Cs"]  # JSON cannot hold a lone one
    data = {"agents": ["".join(escaped)], "plain": "naïve 中文 [red]"}
    written = inert_json(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    assert orjson.loads(written) == data
    assert not [c for c in written.decode() if unsafe(c) and c != "\n"]


def test_the_line_filter_blanks_what_a_widget_forgot_to_escape_keeping_the_lines_width():
    segments = [Segment("ok "), Segment("a\x1b]0;x\x07b\u202ec\u00ad", None)]
    out = InertLines().apply(segments, Color(0, 0, 0))
    assert "".join(s.text for s in out) == "ok a]0;xbc "
    assert sum(s.cell_length for s in out) == sum(s.cell_length for s in segments)
    clean = [Segment("nothing to do")]
    assert InertLines().apply(clean, Color(0, 0, 0)) is clean


# -- the console against real guards -----------------------------------------------------------------------------

# A hostile agent, its tool and args, its harness and its parent: what any client of the harness socket may send.
AGENT = "evil\x1b]0;PWNED\x07\x9b2J\u202eabc\u2066\u200b\ufeff\u2028x"
PARENT = "parent\u202eof\x85\u061c"
TOOL = "tool\x9b31m\u202e\u200f"
ARGS = {"q": "a\x1b[2Jb\x9d8;;http://x\x9c\u2029c\U000e0041"}
HARNESS = "harn\x9b2J\u202ess"
GUARD_NAME = "box\x9b2J\u202e"
SIZE = (200, 50)


def rendered(app: App) -> str:
    """The text of what the screen shows now (every widget, the dialogs and the notices), as the terminal gets it."""
    return html.unescape(app.export_screenshot())


def assert_inert(app: App, where: str, *visible: str) -> None:
    text = rendered(app)
    live = sorted({f"U+{ord(c):04X}" for c in text if unsafe(c) and c != "\n"})  # the SVG's own lines break
    assert live == [], f"{where}: drawn as they are"
    for escape in visible:
        lines = re.sub(r"<(?!U\+)[^>]*>", "", text).replace("\xa0", " ")
        assert escape in text, f"{where}: {escape!r} not shown in:\n" + "\n".join(
            line for line in lines.split("\n") if line.strip()
        )


async def shows_inert(app: App, pilot: object, where: str, *visible: str) -> None:
    """Once the screen shows what it must (the hostile strings as escapes), nothing on it is drawn as it is."""
    try:
        await eventually_async(
            lambda: all(v in rendered(app) for v in visible), what=f"{where}: {visible!r}", pilot=pilot
        )
    finally:
        assert_inert(app, where, *visible)  # on a timeout, fails naming what is missing and showing the screen


@pytest.fixture(params=["shipped", "no last-line filter"])
def net(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """As shipped; and without the filter that blanks what a widget forgot: each place escapes what it draws."""
    if request.param != "shipped":
        monkeypatch.setattr(CBConsole, "get_line_filters", App.get_line_filters)
    return str(request.param)


def hostile_calls(sock: Path) -> GuardClient:
    """The hostile agent's loop (a parent, a subagent, a trip, a repeated call) by a hostile harness, which stays
    connected (so the guard counts it)."""
    client = GuardClient(sock, harness=HARNESS, timeout=30)
    client.check(PARENT, "read", {"p": "\u202e"})
    for _ in range(7):
        client.check(AGENT, TOOL, ARGS, parent=PARENT)
    return client


async def test_every_screen_draws_hostile_ids_tools_args_and_harnesses_inert(tmp_path, monkeypatch, net):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh"))
    sock = run / "guard.sock"
    app = CBConsole(OwnGuard(sock, options=GuardOptions(log_path=tmp_path / "g.log")))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await eventually_async(lambda: app.state.guard_status == "running", what="our guard running", pilot=pilot)
        harness = await asyncio.to_thread(hostile_calls, sock)
        try:
            table, detail = app.query_one(AgentsTable), app.query_one(AgentDetail)
            await eventually_async(lambda: AGENT in table.ordered_keys, what="the hostile agent on screen", pilot=pilot)
            await eventually_async(
                lambda: app.state.trips_seen >= 1 and app.query_one(KeysTable).row_count >= 1, pilot=pilot
            )
            await eventually_async(
                lambda: HARNESS in app.state.harnesses, what="the hostile harness counted", pilot=pilot
            )
            table.move_cursor(row=table.get_row_index(AGENT))
            await eventually_async(lambda: table.selected == AGENT, what="the hostile agent selected", pilot=pilot)
            app.state.changed()  # drawn again: the detail pane shows the selected agent
            await eventually_async(lambda: inert(AGENT) in text_of(detail), what="its detail", pilot=pilot)
            await shows_inert(app, pilot, "the main screen", "\\x9b2J", "<U+202E>", "\\x1b]0;PWNED\\x07", "<U+2028>")
            await pilot.press("t")  # the tree: the subagent under its hostile parent
            title = app.query_one("#agents-title")
            await eventually_async(lambda: "under their parent" in text_of(title), what="the tree drawn", pilot=pilot)
            await shows_inert(app, pilot, "the tree", "\\x85")
            await pilot.press("c", "C")  # copied, and said so in notices
            await eventually_async(lambda: app.clipboard.startswith("tool"), what="the call copied", pilot=pilot)
            assert app.clipboard == inert(app.clipboard) and "\\x9b31m" in app.clipboard
            await eventually_async(lambda: rendered(app).count("Copied") >= 2, what="both notices shown", pilot=pilot)
            await shows_inert(app, pilot, "the notices", "Copied")
            await pilot.press("i")  # the interrupt's confirmation names the agent
            await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
            await shows_inert(app, pilot, "the interrupt's confirmation", "\\x9b2J")
            await pilot.press("n", "x")  # exempting its tool: the confirmation names the tool
            await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
            await shows_inert(app, pilot, "the exempt confirmation", "\\x9b31m")
            await pilot.press("y")  # exempted: the notice, the header's exempt list
            await eventually_async(lambda: TOOL in app.state.exempt, what="the tool exempted", pilot=pilot)
            header = app.query_one(GuardHeader)
            await eventually_async(lambda: inert(TOOL) in text_of(header), what="the header's exempt list", pilot=pilot)
            await shows_inert(app, pilot, "the header after the exemption", "exempt")
            await pilot.press("o")  # the override form names the agent
            await eventually_async(lambda: isinstance(app.screen, OverrideScreen), pilot=pilot)
            await shows_inert(app, pilot, "the override form", "\\x9b2J")
            await pilot.press("escape", "e")  # the config form: the exempt list holds the hostile tool
            await eventually_async(lambda: isinstance(app.screen, ConfigScreen), pilot=pilot)
            form = app.screen
            exempt = form.query_one("#f-exempt", Input)
            assert parse_field("names", exempt.value) == list(app.state.exempt)  # reads back as the same list
            assert form.validate_form() == {}  # saved untouched, it changes nothing
            exempt.focus()
            await eventually_async(lambda: exempt.has_focus, what="the exempt field focused", pilot=pilot)
            await shows_inert(app, pilot, "the config form's exempt field", "\\x9B31m\\u202E")
            await pilot.press("escape", "enter")  # the drill-down: its calls as the guard sends them
            await eventually_async(lambda: isinstance(app.screen, AgentScreen), pilot=pilot)
            drill = app.screen
            assert isinstance(drill, AgentScreen)
            await asyncio.to_thread(harness.check, AGENT, TOOL, ARGS, parent=PARENT)  # one more, while followed
            await eventually_async(lambda: len(drill.follow.calls) >= 1, what="its calls followed", pilot=pilot)
            await eventually_async(
                lambda: f"({drill.follow.since:,} since opened" in text_of(drill.calls_title),
                what="the drill-down drawn with its calls",
                pilot=pilot,
            )
            await shows_inert(app, pilot, "the drill-down", "\\x9b2J", "<U+202E>", "\\x9d8;;http://x\\x9c")
            await pilot.press("c")
            await eventually_async(
                lambda: app.clipboard == inert(AGENT), what="the id copied as it is shown", pilot=pilot
            )
            await pilot.press("escape", "S")  # the incident report: JSON and the screenshot
            await eventually_async(
                lambda: reports_dir().is_dir() and len(list(reports_dir().iterdir())) == 2, pilot=pilot
            )
            for saved in reports_dir().iterdir():
                assert not [c for c in saved.read_text() if unsafe(c) and c != "\n"], saved.name
            [report] = reports_dir().glob("*.json")
            assert AGENT in {a["agent"] for a in orjson.loads(report.read_bytes())["agents"]}  # the data, exact
            await pilot.press("q")  # harnesses are connected: the dialog names them
            await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
            await shows_inert(app, pilot, "the quit dialog", "harn\\x9b2J<U+202E>ss")
            await pilot.press("s")
        finally:
            harness.close()


async def test_a_fleets_guard_names_are_drawn_inert(guard_factory, net):
    first, second = guard_factory(), guard_factory()
    app = CBConsole(FleetSession([FleetMember(GUARD_NAME, first.operator), FleetMember("plain", second.operator)]))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        harness = await asyncio.to_thread(hostile_calls, first.socket)
        try:
            table = app.query_one(AgentsTable)
            await eventually_async(
                lambda: any(a.id == AGENT for a in app.state.agents.values()), what="the agent", pilot=pilot
            )
            key = next(k for k, a in app.state.agents.items() if a.id == AGENT)
            await eventually_async(lambda: key in table.ordered_keys, what="the agent on screen", pilot=pilot)
            table.move_cursor(row=table.get_row_index(key))
            await eventually_async(lambda: table.selected == key, pilot=pilot)
            app.state.changed()  # drawn again: the detail pane shows the selected agent
            detail = app.query_one(AgentDetail)
            await eventually_async(lambda: inert(AGENT) in text_of(detail), what="the agent's detail", pilot=pilot)
            await shows_inert(app, pilot, "the fleet's main screen", "box\\x9b2J<U+202E>")
            await pilot.press("p")  # the pause's confirmation names the guard
            await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), pilot=pilot)
            await shows_inert(app, pilot, "the pause's confirmation", "box\\x9b2J<U+202E>")
            await pilot.press("n")
        finally:
            harness.close()


class TwoUnreachedGuards(NoGuard):
    """Two guards named by their hosts (no name of the operator's): the frames a test injects."""

    def guard_names(self) -> list[str]:
        return ["", ""]


async def test_a_fleets_hosts_as_the_guards_send_them_are_drawn_inert(net):
    app = CBConsole(TwoUnreachedGuards(), clock=lambda: T0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        for number, host in enumerate([f"host\x9b2J{chr(0x202E)}a", "host\u2066b\x1b]0;x\x07"]):
            sent = frame(STATES["looping"])
            sent["stats"]["host"] = host
            app.state.apply(StateFrame.from_json(sent), guard=number)
            app.state.set_guard_status("running", guard=number)
        app.main.flush()
        hosts = ("host\\x9b2J<U+202E>a", "host<U+2066>b\\x1b]0;x\\x07")
        await eventually_async(lambda: all(h in rendered(app) for h in hosts), what="both hosts shown", pilot=pilot)
        assert_inert(app, "the hosts", *hosts)


# -- the real console in a real terminal --------------------------------------------------------------------------


@pytest.fixture
def terminal() -> Iterator[Tmux]:
    need_tools(["tmux"])
    t = Tmux()
    yield t
    t.kill()


@pytest.mark.needs("tmux")
def test_a_hostile_agent_id_neither_retitles_nor_clears_a_real_terminal(terminal, guard):
    title = "cbtest-title"
    console = f"{shlex.quote(sys.executable)} -m breaker.cli --attach --socket {shlex.quote(str(guard.socket))}"
    terminal.start(f"cd {ROOT} && printf '\\033]2;{title}\\033\\\\' && env -u COLUMNS -u LINES {console}")
    terminal.run("set-option", "-t", "main", "allow-rename", "on")
    terminal.wait_for("guard attached", timeout=60)
    assert terminal.run("display-message", "-p", "-t", "main", "#{pane_title}").strip() == title
    client = GuardClient(guard.socket, harness="pytest", timeout=30)
    for _ in range(7):
        client.check(AGENT, "read", {"p": "\x1b]2;PWNED\x07 \x9b2J"})
    client.close()
    screen = terminal.wait_for("\\x9b2J", timeout=30)
    assert "\\x1b]0;PWNED\\x07" in screen and "<U+202E>" in screen  # shown, escaped
    assert "Agents — most dangerous first (1)" in screen  # not cleared
    assert terminal.run("display-message", "-p", "-t", "main", "#{pane_title}").strip() == title
    assert "PWNED" not in terminal.run("display-message", "-p", "-t", "main", "#{window_name}")
