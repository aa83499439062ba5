"""The activity chart: checks and denies per second from the guard's cumulative counters, drawn as bars."""

from __future__ import annotations

import asyncio
import re

import pytest
from rich.text import Text

from console.state import ACTIVITY_SECONDS, Activity
from console.state import ActivitySecond as Second
from console.themes import THEME_VARIABLES
from console.widgets.activity import ActivityChart, activity_label, bars
from tests.test_console_pilot import app_for, loop
from tests.test_console_snapshots import CROWDED, T0, frame, inject, make_app
from tests.waits import eventually_async

COLORS = dict(THEME_VARIABLES)


def styles(line: Text) -> list[str]:
    """Each cell's style, from the text's spans (bars are one cell a character)."""
    out = [str(line.style)] * len(line.plain)
    for span in line.spans:
        out[span.start : span.end] = [str(span.style)] * (span.end - span.start)
    return out


# -- the history -------------------------------------------------------------------------------------


def test_the_first_frame_is_a_baseline_and_later_frames_add_their_deltas_to_their_second():
    activity = Activity()
    activity.record(T0 + 0.2, 1_000_000, 500)  # a guard that ran for days: not a spike
    activity.record(T0 + 1.1, 1_000_010, 500)
    activity.record(T0 + 1.6, 1_000_015, 502)
    activity.record(T0 + 2.3, 1_000_020, 502)
    assert activity.last(T0 + 3, 3) == [(0, 0), (15, 2), (5, 0)]


def test_the_second_still_filling_is_left_out():
    activity = Activity()
    activity.record(T0, 0, 0)
    activity.record(T0 + 1.5, 7, 1)
    assert activity.last(T0 + 1.9, 2) == [(0, 0), (0, 0)]
    assert activity.last(T0 + 2.0, 2) == [(0, 0), (7, 1)]


def test_a_guard_restart_counts_its_new_counters_from_zero_never_negative():
    activity = Activity()
    activity.record(T0, 400, 30)
    activity.record(T0 + 1, 410, 31)
    activity.record(T0 + 2, 4, 0)  # a new guard: it has counted 4 checks since it started
    activity.record(T0 + 3, 9, 2)
    assert activity.last(T0 + 4, 3) == [(10, 1), (4, 0), (5, 2)]
    activity.record(T0 + 4, 12, 1)  # only the denies went down: a new guard too
    assert activity.last(T0 + 5, 1) == [(12, 1)]
    assert all(t.checks >= 0 and t.denies >= 0 for t in activity.tallies)


def test_seconds_without_frames_are_zeros():
    activity = Activity()
    activity.record(T0, 0, 0)
    activity.record(T0 + 1, 5, 0)
    activity.record(T0 + 6, 8, 3)  # no frame for four seconds: what came meanwhile lands in this one
    assert activity.last(T0 + 7, 6) == [(5, 0), (0, 0), (0, 0), (0, 0), (0, 0), (3, 3)]
    assert activity.last(T0 + 20, 6) == [(0, 0)] * 6  # and nothing since: the chart runs on, empty


def test_the_history_keeps_its_span_and_no_more():
    activity = Activity()
    for s in range(3 * ACTIVITY_SECONDS):
        activity.record(T0 + s, 2 * s, s // 10)
    assert len(activity.tallies) == ACTIVITY_SECONDS
    assert activity.last(T0 + 3 * ACTIVITY_SECONDS) == [(2, int(s % 10 == 0)) for s in range(600, 900)]
    activity.record(T0 + 100 * ACTIVITY_SECONDS, 5000, 100)  # a gap longer than the span
    assert len(activity.tallies) == ACTIVITY_SECONDS
    assert activity.last(T0 + 100 * ACTIVITY_SECONDS + 1) == [(0, 0)] * (ACTIVITY_SECONDS - 1) + [(3202, 11)]


def test_a_clock_that_steps_back_adds_to_the_newest_second():
    activity = Activity()
    activity.record(T0 + 5, 0, 0)
    activity.record(T0 + 6, 3, 0)
    activity.record(T0 + 4, 5, 1)
    assert activity.last(T0 + 7, 2) == [(0, 0), (5, 1)]


# -- the drawing -------------------------------------------------------------------------------------


def quiet_then_a_loop() -> list[Second]:
    """Five minutes of 5 checks/s, then ten seconds of a loop: 10 checks/s, 8 of them denied."""
    return [Second(5, 0)] * (ACTIVITY_SECONDS - 10) + [Second(10, 8)] * 10


def test_a_burst_of_denies_shows_in_the_last_columns_in_the_trip_colour():
    chart = bars(quiet_then_a_loop(), 60, 2, COLORS)  # five seconds a column
    top, bottom = chart.split("\n")
    assert len(top.plain) == len(bottom.plain) == 60
    trip = [i for i, style in enumerate(styles(bottom)) if style == COLORS["trip"]]
    assert trip == [58, 59]
    assert bottom.plain[58:] == "██" and top.plain[58:] == "██"  # the busiest columns: full height
    assert set(styles(bottom)[:58]) == {COLORS["ok"]} and set(bottom.plain[:58]) == {"█"}  # half height: 8 of 16
    assert top.plain[:58] == " " * 58


def test_a_single_deny_still_colours_its_column():
    tallies = [Second(40, 0)] * (ACTIVITY_SECONDS - 1) + [Second(40, 1)]
    bottom = bars(tallies, ACTIVITY_SECONDS, 2, COLORS).split("\n")[1]
    assert styles(bottom)[-1] == COLORS["trip"] and set(styles(bottom)[:-1]) == {COLORS["ok"]}
    top = bars(tallies, ACTIVITY_SECONDS, 2, COLORS).split("\n")[0]
    assert styles(top)[-1] == COLORS["ok"]  # one deny of forty checks: only the lowest cell is the trip colour


@pytest.mark.parametrize("width", [1, 37, 80, 150, 299, 300])
def test_the_bars_fill_the_width_newest_on_the_right(width):
    chart = bars(quiet_then_a_loop(), width, 1, COLORS)
    assert chart.cell_len == width and "\n" not in chart.plain
    assert styles(chart)[-1] == COLORS["trip"]


def test_a_terminal_wider_than_the_span_draws_one_column_a_second_on_the_right():
    chart = bars(quiet_then_a_loop(), 400, 1, COLORS)
    assert chart.plain[:100] == " " * 100
    assert styles(chart)[100:].count(COLORS["trip"]) == 10


def test_an_idle_guard_is_a_muted_baseline():
    chart = bars([Second(0, 0)] * ACTIVITY_SECONDS, 50, 2, COLORS)
    top, bottom = chart.split("\n")
    assert top.plain == " " * 50 and bottom.plain == "▁" * 50
    assert set(styles(bottom)) == {COLORS["muted"]}


def test_the_label_names_the_span_the_busiest_second_and_the_denies():
    tallies = [Second(5, 0)] * (ACTIVITY_SECONDS - 3) + [
        Second(47, 3),
        Second(12, 9),
        Second(1, 0),
    ]
    label = activity_label(tallies, COLORS)
    assert label.plain == "activity · last 5 min · peak 47 checks/s · 12 denies"
    assert any(str(s.style) == f"bold {COLORS['trip']}" for s in label.spans)
    assert activity_label([Second(0, 0)] * 90, COLORS).plain == "activity · last 90 s · peak 0 checks/s · 0 denies"


# -- on the main screen ------------------------------------------------------------------------------


LABEL = "activity · last 5 min · peak 4 checks/s · 6 denies"  # the snapshots' fixture: a loop forming


@pytest.mark.parametrize(("height", "lines"), [(16, 0), (24, 1), (40, 3)])
async def test_the_chart_is_three_lines_on_a_tall_terminal_one_on_a_short_one_and_hidden_on_a_tiny_one(height, lines):
    app = make_app("dark")
    async with app.run_test(size=(80, height)) as pilot:
        inject(app, frame(CROWDED))
        await pilot.pause()
        chart = app.query_one(ActivityChart)
        assert (chart.outer_size.height if chart.display else 0) == lines
        content = str(chart.content).splitlines()
        if lines == 3:  # the label over two lines of bars
            assert content[0] == LABEL and [len(line) for line in content[1:]] == [78, 78]
        elif lines == 1:  # the bars after the label, to the edge
            assert len(content) == 1 and content[0].startswith(LABEL + " ▁") and len(content[0]) == 78


async def test_the_chart_is_drawn_once_a_second_at_most_and_follows_the_width(monkeypatch):
    app = make_app("dark")
    async with app.run_test(size=(150, 40)) as pilot:
        inject(app, frame(CROWDED))
        await pilot.pause()
        chart = app.query_one(ActivityChart)
        drawn: list[object] = []
        real = ActivityChart.update
        monkeypatch.setattr(
            ActivityChart, "update", lambda self, content="", **kw: drawn.append(content) or real(self, content, **kw)
        )
        for _ in range(5):  # new frames within the same second of the (frozen) clock: nothing new to show
            app.state.changed()
            app.main.flush()
        assert drawn == []
        await pilot.resize_terminal(100, 40)
        await pilot.pause()
        assert len(drawn) == 1
        assert all(len(line) == 98 for line in str(chart.content).splitlines()[1:])


async def test_a_loops_denies_show_in_the_chart_against_a_real_guard(guard):
    app = app_for(guard)
    async with app.run_test(size=(120, 40)) as pilot:
        # The first frame's counters are the baseline: the loop must come after it.
        await eventually_async(lambda: app.state.stats is not None, what="the guard's first frame", pilot=pilot)
        results = await asyncio.to_thread(loop, guard, "looper-chart", 9)
        denied = sum(not r.allowed for r in results)
        assert denied == 3  # duplicateLimit 6: the seventh call on is denied
        chart = app.query_one(ActivityChart)
        await eventually_async(
            lambda: f"· {denied} denies" in str(chart.content), what="the denies in the chart", pilot=pilot
        )
        peak = re.fullmatch(
            r"activity · last 5 min · peak (\d+) checks/s · 3 denies", str(chart.content).splitlines()[0]
        )
        assert peak is not None and 1 <= int(peak[1]) <= 9
        shown = app.state.activity.last(app.state.clock())
        assert sum(t.checks for t in shown) == 9 and sum(t.denies for t in shown) == denied
        assert isinstance(chart.content, Text)
        assert app.main.roles()["trip"] in styles(chart.content.split("\n")[-1])  # the loop's seconds
