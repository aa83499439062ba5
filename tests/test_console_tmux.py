"""cbconsole as a person runs it: in a real terminal (tmux), against a real guard and real clients."""

from __future__ import annotations

import shutil
import sys

import pytest

from breaker.client import GuardClient
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (.ci/run installs it)")


def test_cbconsole_in_a_terminal_shows_a_loop_forming_and_interrupts_it(guard, tmux):
    # COLUMNS/LINES from the test runner would override the terminal size Textual reads
    cmd = (
        f"cd {ROOT} && env -u COLUMNS -u LINES {sys.executable} -m console.cli --attach --socket {guard.socket}; "
        "echo CONSOLE-EXITED; sleep 30"
    )
    tmux.start(cmd)
    tmux.wait_for("guard attached")
    client = GuardClient(guard.socket, harness="dsh")
    for _ in range(9):
        client.check("tmux-looper", "web_search", {"query": "the same query"})
    screen = tmux.wait_for("tripped: duplicate")
    row = next(line for line in screen.splitlines() if "tmux-looper" in line and "tripped" in line)
    assert "dsh" in row and "6/6" in row
    assert 'web_search query="the same query"' in screen  # the top repeated calls
    tmux.keys("i")
    tmux.wait_for("Interrupt agents?")
    tmux.keys("y")
    tmux.wait_for("interrupted")
    assert client.check("tmux-looper", "read", {"path": "x"}).kind == "interrupted"
    tmux.keys("q")
    tmux.wait_for("CONSOLE-EXITED")
    client.close()
