"""cbconsole attached late, in a real terminal (tmux) against a real guard (issue 24): the trips made before it came
are in its header and list, and `enter` on the looping agent shows its last calls with their decisions at once."""

from __future__ import annotations

import re
import sys

import pytest

from breaker.client import GuardClient
from tests.conftest import ROOT
from tests.test_console_tmux import agent_row

pytestmark = pytest.mark.needs("tmux")


def test_a_console_attached_after_an_agent_tripped_shows_the_trip_and_its_last_calls_on_enter(guard, tmux):
    client = GuardClient(guard.socket, harness="dsh", timeout=30)
    for _ in range(12):  # 6 allowed, 6 denied, before any console
        client.check("tmux-looper", "web_search", {"query": "the same query"})
    client.check("tmux-calm", "read", {"path": "/etc/hosts"})
    client.close()
    cmd = (  # COLUMNS/LINES from the test runner would override the terminal size Textual reads
        f"cd {ROOT} && env -u COLUMNS -u LINES {sys.executable} -m breaker.cli --attach --socket {guard.socket}; "
        "echo CONSOLE-EXITED; sleep 30"
    )
    tmux.start(cmd)
    tmux.wait_for("guard attached")
    agent_row(tmux, "tmux-looper", "dsh", "duplicate")
    screen = tmux.wait_for("Trips (1)")
    assert re.search(r"trips 1\b", screen), screen  # the header
    trip_lines = [line for line in screen.splitlines() if "tmux-looper" in line and "duplicate" in line]
    assert any("web_search" in line and "6/6" in line for line in trip_lines), screen  # the trips list
    tmux.keys("Enter")  # the looper is the most dangerous: the first row, under the cursor
    screen = tmux.wait_for("0 since opened, 12 from before")
    lines = screen.splitlines()
    denies = [line for line in lines if " DENY " in line and "duplicate" in line and "the same query" in line]
    allows = [line for line in lines if " allow " in line and "the same query" in line]
    assert len(denies) == 6 and len(allows) == 6, screen  # its calls, each with its decision
    assert any("6/6" in line for line in denies), screen
    its_trips = lines[next(i for i, line in enumerate(lines) if "Its trips" in line) :]
    assert any("duplicate" in line and "web_search" in line for line in its_trips), screen
    tmux.keys("Escape")
    tmux.wait_for("Trips (1)")
    tmux.keys("q")
    tmux.wait_for("CONSOLE-EXITED")
