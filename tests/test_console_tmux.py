"""cbconsole as a person runs it: in a real terminal (tmux), against a real guard and real clients."""

from __future__ import annotations

import json
import sys

import pytest

from breaker.client import GuardClient
from console.screens.help import ABOUT
from tests.conftest import ROOT
from tests.waits import eventually

pytestmark = pytest.mark.needs("tmux")


def agent_row(tmux, agent: str, harness: str, status: str) -> str:
    """The agents table's line for `agent` once it shows `status`. The trips list and the top calls name the
    agent and the same words too, but only the agents table shows its harness."""

    def row() -> str | None:
        for line in tmux.screen().splitlines():
            padded = f"{line} "  # the pane trims trailing blanks; the harness may be the last column
            if agent in line and f" {harness} " in padded and f" {status} " in padded:
                return line
        return None

    try:
        return eventually(row, what=f"a row of {agent!r} with status {status!r}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{tmux.screen()}") from None


def test_cbconsole_in_a_terminal_shows_a_loop_forming_and_interrupts_it(guard, tmux):
    # COLUMNS/LINES from the test runner would override the terminal size Textual reads
    cmd = (
        f"cd {ROOT} && env -u COLUMNS -u LINES {sys.executable} -m breaker.cli --attach --socket {guard.socket}; "
        "echo CONSOLE-EXITED; sleep 30"
    )
    tmux.start(cmd)
    tmux.wait_for("guard attached")
    client = GuardClient(guard.socket, harness="dsh", timeout=30)
    for _ in range(9):
        client.check("tmux-looper", "web_search", {"query": "the same query"})
    row = agent_row(tmux, "tmux-looper", "dsh", "duplicate")
    assert "6/6" in row
    screen = tmux.screen()
    assert 'web_search query="the same query"' in screen  # the top repeated calls
    tmux.keys("i")
    tmux.wait_for("Interrupt agents?")
    tmux.keys("y")
    agent_row(tmux, "tmux-looper", "dsh", "interrupted")
    assert client.check("tmux-looper", "read", {"path": "x"}).kind == "interrupted"
    tmux.keys("q")
    tmux.wait_for("CONSOLE-EXITED")
    client.close()


def test_attach_to_a_path_with_no_guard_says_none_is_there_names_the_path_and_attaches_once_one_answers(
    guard_factory, tmux
):
    guard = guard_factory(start=False)  # its socket's path is known; nothing listens there yet
    cmd = (
        f"cd {ROOT} && env -u COLUMNS -u LINES {sys.executable} -m breaker.cli --attach {guard.socket}; "
        "echo CONSOLE-EXITED; sleep 30"
    )
    tmux.start(cmd, width=300)
    screen = tmux.wait_for("No guard there")  # the notice, at once
    assert "guard starting" not in screen
    # The header says so and keeps counting the seconds it has been retrying, naming the path it tries.
    screen = tmux.wait_for(f"retrying 2 s: no guard at {guard.operator} (No such file or directory)")
    assert "● guard unreachable" in screen.splitlines()[0]
    guard.start()
    tmux.wait_for("guard attached")
    client = GuardClient(guard.socket, harness="dsh", timeout=30)
    assert client.check("tmux-late", "read", {"path": "x"}).fallback is False
    agent_row(tmux, "tmux-late", "dsh", "ok")  # attached for real: the guard's agents show
    client.close()
    tmux.keys("q")
    tmux.wait_for("CONSOLE-EXITED")


def test_replay_of_a_path_relative_to_the_current_directory_plays_that_file(tmux, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    call = {"agent": "relative-replayer", "tool": "web_search", "args": {"query": "the same query"}}
    (work / "calls.jsonl").write_text("".join(json.dumps(call) + "\n" for _ in range(9)))
    cmd = (
        f"cd {work} && env -u COLUMNS -u LINES {sys.executable} -m breaker.cli --replay calls.jsonl --speed 0 "
        "--state none; echo CONSOLE-EXITED; sleep 30"
    )
    tmux.start(cmd)
    tmux.wait_for("Replay finished.", timeout=60)
    agent_row(tmux, "relative-replayer", "cbreplay", "duplicate")
    tmux.keys("q")
    tmux.wait_for("CONSOLE-EXITED")


def test_at_80x24_the_footer_offers_help_and_quit_and_the_help_box_fits_with_its_words_whole(guard, tmux):
    cmd = (
        f"cd {ROOT} && env -u COLUMNS -u LINES {sys.executable} -m breaker.cli --attach --socket {guard.socket}; "
        "echo CONSOLE-EXITED; sleep 30"
    )
    tmux.start(cmd, width=80, height=24)
    tmux.wait_for("guard attached")
    screen = tmux.wait_for("q Quit")
    footer = screen.rstrip("\n").splitlines()[-1]
    assert "? Help" in footer and "q Quit" in footer, screen
    tmux.keys("?")
    screen = tmux.wait_for("what it does")
    lines = screen.rstrip("\n").splitlines()
    # The box: a border on both sides of every line it spans, all within the 80 columns.
    box = [line for line in lines if line.startswith("█")]
    assert len(box) >= 10 and all(len(line) <= 80 and line.rstrip().endswith("█") for line in box), screen
    inside = " ".join(" ".join(line.strip("█").split()) for line in box)
    assert " ".join(ABOUT.split()[:40]) in inside  # every word of the text whole, none cut at the edge
    assert tmux.wait_for("esc Close").rstrip("\n").splitlines()[-1].split() == ["esc", "Close"]  # its own key
    tmux.keys("Escape")
    tmux.wait_for("q Quit")
    tmux.keys("q")
    tmux.wait_for("CONSOLE-EXITED")
