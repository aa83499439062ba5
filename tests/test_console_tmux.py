"""cbconsole as a person runs it: in a real terminal (tmux), against a real guard and real clients."""

from __future__ import annotations

import sys
import time

import pytest

from breaker.client import GuardClient
from tests.conftest import ROOT

pytestmark = pytest.mark.needs("tmux")


def agent_row(tmux, agent: str, harness: str, status: str, timeout: float = 20.0) -> str:
    """The agents table's line for `agent` once it shows `status`. The trips list and the top calls name the
    agent and the same words too, but only the agents table shows its harness."""
    deadline = time.monotonic() + timeout
    while True:
        screen = tmux.screen()
        for line in screen.splitlines():
            padded = f"{line} "  # the pane trims trailing blanks; the harness may be the last column
            if agent in line and f" {harness} " in padded and f" {status} " in padded:
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no row of {agent!r} with status {status!r}:\n{screen}")
        time.sleep(0.1)


def test_cbconsole_in_a_terminal_shows_a_loop_forming_and_interrupts_it(guard, tmux):
    # COLUMNS/LINES from the test runner would override the terminal size Textual reads
    cmd = (
        f"cd {ROOT} && env -u COLUMNS -u LINES {sys.executable} -m console.cli --attach --socket {guard.socket}; "
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
