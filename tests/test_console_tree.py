"""Subagents as a tree: the order (parents first, siblings by danger, cycles and depth), and `t` on a real guard."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from breaker.protocol import AgentRow, StateFrame
from console.state import TREE_DEPTH, ConsoleAgent, ConsoleState, ShownAgent, tree_order
from console.widgets.agents import AgentsTable
from tests.test_console_pilot import SIZE, app_for, loop
from tests.waits import eventually_async


def make(agent: str, parent: str | None = None, status: str = "ok", worst: int = 1) -> ConsoleAgent:
    row = AgentRow(
        agent=agent,
        harness="pytest",
        parent=parent,
        calls=worst,
        window_fill=worst,
        window=200,
        cap=300,
        worst_count=worst,
        worst_tool="read",
        worst_preview="",
        duplicate_limit=6,
        denies={},
        status=status,
        last_tool="read",
        last_seen=None,
        interrupt_reason=None,
    )
    return ConsoleAgent(agent, row)


def ids(rows: list[ShownAgent]) -> list[str]:
    return [r.agent.id for r in rows]


def lines(rows: list[ShownAgent]) -> list[str]:
    return [r.glyphs + r.agent.id for r in rows]


def test_each_parent_is_followed_by_its_subagents_with_tree_glyphs():
    rows = tree_order([make("c1", "s"), make("s"), make("g", "c1"), make("c2", "s", worst=3)])
    assert lines(rows) == ["s", "├─c2", "└─c1", "  └─g"]  # c2 is closer to the limit than c1


def test_siblings_and_roots_go_most_dangerous_first_a_root_ranked_by_its_worst_subagent():
    agents = [
        make("calm-session"),
        make("busy-session", worst=4),
        make("looping-child", "calm-session", status="duplicate", worst=6),
        make("quiet-child", "calm-session"),
        make("capped-child", "calm-session", status="cap"),
    ]
    rows = tree_order(agents)
    # The calm session carries a loop: it and its family come first; its children in danger order.
    assert ids(rows) == ["calm-session", "looping-child", "capped-child", "quiet-child", "busy-session"]
    assert [r.glyphs for r in rows] == ["", "├─", "├─", "└─", ""]


def test_an_agent_whose_parent_the_console_does_not_know_is_a_root():
    rows = tree_order([make("orphan", "gone-session", status="cap"), make("s"), make("c", "s")])
    assert lines(rows) == ["orphan", "s", "└─c"]
    assert lines(tree_order([make("self", "self")])) == ["self"]  # its own parent: a root too


def test_a_cycle_of_parent_links_keeps_every_agent_exactly_once():
    agents = [
        make("a", "c"),
        make("b", "a", status="duplicate", worst=6),  # the most dangerous of the cycle: shown as its root
        make("c", "b"),
        make("tail", "a"),
        make("loner", "loner"),
        make("root"),
        make("x", "y"),
        make("y", "x"),
    ]
    rows = tree_order(agents)
    assert sorted(ids(rows)) == sorted(a.id for a in agents)
    assert lines(rows)[:4] == ["b", "└─c", "  └─a", "    └─tail"]
    assert {r.agent.id for r in rows if not r.glyphs} == {"b", "loner", "root", "x"}  # x, y: the tie goes by id


def test_random_parent_links_never_drop_or_repeat_an_agent_and_parents_come_first():
    rng = random.Random(12)
    for _ in range(200):
        n = rng.randint(1, 30)
        names = [f"a{i}" for i in range(n)]
        agents = [
            make(
                name,
                rng.choice([None, f"unknown{i}", *names]),
                rng.choice(["ok", "cap", "duplicate"]),
                rng.randint(1, 6),
            )
            for i, name in enumerate(names)
        ]
        rows = tree_order(agents)
        assert sorted(ids(rows)) == sorted(names)
        at = {r.agent.id: i for i, r in enumerate(rows)}
        for i, r in enumerate(rows):
            parent = r.agent.data.parent
            if r.glyphs:  # a subagent comes after its parent, inside its parent's block
                assert parent in at and at[parent] < i
                assert all(rows[j].glyphs for j in range(at[parent] + 1, i + 1))


def test_depth_is_indented_at_most_three_levels_deeper_ones_marked():
    chain = [make("d0"), *(make(f"d{i}", f"d{i - 1}") for i in range(1, 7))]
    rows = tree_order(chain)
    assert TREE_DEPTH == 3
    assert lines(rows) == ["d0", "└─d1", "  └─d2", "    └─d3", "    └…d4", "    └…d5", "    └…d6"]
    assert max(len(r.glyphs) for r in rows) == 2 * TREE_DEPTH


def test_a_ten_thousand_deep_chain_and_a_ten_thousand_long_cycle_do_not_recurse():
    n = 10_000
    chain = tree_order([make("c0"), *(make(f"c{i}", f"c{i - 1}") for i in range(1, n))])
    assert ids(chain) == [f"c{i}" for i in range(n)]
    cycle = tree_order([make(f"k{i}", f"k{(i - 1) % n}") for i in range(n)])
    assert sorted(ids(cycle)) == sorted(f"k{i}" for i in range(n))


def test_the_filter_in_tree_mode_keeps_matches_under_their_ancestors_shown_as_context():
    state = ConsoleState(clock=lambda: 0.0)
    agents = (make("session"), make("helper", "session"), make("needle-sub", "helper"), make("other"))
    state.apply(StateFrame(seq=1, full=True, time=0.0, agents=[a.data for a in agents]))  # as the link hands it
    state.set_filter("needle")
    assert [(r.agent.id, r.context) for r in state.shown()] == [("needle-sub", False)]  # flat: matches only
    state.set_tree(True)
    rows = state.shown()
    assert lines(rows) == ["session", "└─helper", "  └─needle-sub"]
    assert [r.context for r in rows] == [True, True, False]
    state.set_filter("")
    assert sorted(ids(state.shown())) == ["helper", "needle-sub", "other", "session"]


# -- `t` against a real guard --------------------------------------------------------------------------


async def test_t_shows_subagents_right_after_their_parent_and_back_flat_with_the_cursor_on_the_same_agent(guard):
    app = app_for(guard)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(loop, guard, "session-calm", 1, "read", {"path": "s"})
        await asyncio.to_thread(loop, guard, "other-busy", 5, "read", {"path": "o"})
        await asyncio.to_thread(loop, guard, "sub-quiet", 1, "read", {"path": "q"}, parent="session-calm")
        await asyncio.to_thread(loop, guard, "sub-looper", 8, parent="session-calm")
        table = app.query_one(AgentsTable)
        agents = ("session-calm", "other-busy", "sub-quiet", "sub-looper")
        await eventually_async(lambda: all(a in table.ordered_keys for a in agents), what="four agents", pilot=pilot)
        await eventually_async(
            lambda: table.get_cell("sub-looper", "status").plain == "duplicate", what="the loop", pilot=pilot
        )
        flat = ["sub-looper", "other-busy", "session-calm", "sub-quiet"]  # most dangerous first
        # A cell shows the agent's row as it is now; the order is the last frame drawn's: it follows at the next.
        await eventually_async(lambda: list(table.ordered_keys) == flat, what="the table in danger order", pilot=pilot)
        table.move_cursor(row=table.get_row_index("sub-quiet"))
        await eventually_async(lambda: table.selected == "sub-quiet", what="sub-quiet selected", pilot=pilot)

        await pilot.press("t")
        await eventually_async(lambda: table.get_row_index("session-calm") == 0, what="the tree", pilot=pilot)
        assert [table.get_cell(a, "agent").plain for a in ("session-calm", "sub-looper", "sub-quiet")] == [
            "session-calm",
            "├─sub-looper",
            "└─sub-quiet",
        ]
        assert [table.get_row_index(a) for a in ("session-calm", "sub-looper", "sub-quiet", "other-busy")] == [
            0,
            1,
            2,
            3,
        ]  # the calm session carries the loop: its family first
        assert table.selected == "sub-quiet" and table.cursor_row == table.get_row_index("sub-quiet")
        assert "subagents under their parent" in str(app.main.agents_title.content)

        await pilot.press("t")
        await eventually_async(lambda: table.get_row_index("sub-looper") == 0, what="flat again", pilot=pilot)
        assert list(table.ordered_keys) == flat
        assert table.get_cell("sub-quiet", "agent").plain == "sub-quiet"
        assert table.selected == "sub-quiet" and table.cursor_row == table.get_row_index("sub-quiet")


# -- the flat order, kept between frames ------------------------------------------------------------


def test_the_kept_flat_order_always_equals_a_full_sort_by_danger_as_rows_rates_and_agents_change():
    """`ConsoleState.ranked` re-places only what changed; after any mix of new rows, rate samples, new and
    gone agents it must give exactly the order a full sort gives."""
    rnd = random.Random(12)
    now = [1000.0]
    state = ConsoleState(clock=lambda: now[0])
    statuses = ["ok", "ok", "ok", "warned", "duplicate", "cap", "interrupted"]
    made = 0

    def fresh() -> AgentRow:
        nonlocal made
        made += 1
        return make(f"ag-{made:04d}", worst=rnd.randint(1, 6)).data

    def frame(rows: list[AgentRow], gone: list[str] = [], full: bool = False) -> StateFrame:  # noqa: B006
        return StateFrame(seq=0, full=full, time=now[0], agents=rows, gone=list(gone))

    state.apply(frame([fresh() for _ in range(300)], full=True))
    for step in range(60):
        ids_now = list(state.agents)
        changed = []
        for agent in rnd.sample(ids_now, k=rnd.randint(0, 40)):
            row = replace(state.agents[agent].data, status=rnd.choice(statuses))
            row.calls += rnd.randint(0, 50)  # calls move the rate at the next sample
            row.worst_count = rnd.randint(1, 6)
            changed.append(row)
        changed.extend(fresh() for _ in range(rnd.randint(0, 5)))
        gone = rnd.sample(ids_now, k=rnd.randint(0, 5))
        now[0] += rnd.choice([0.1, 1.0, 1.5])  # some frames sample the rates, some do not
        state.apply(frame([r for r in changed if r.agent not in gone], gone))
        expected = [a.id for a in sorted(state.agents.values(), key=lambda a: a.danger)]
        assert [a.id for a in state.ranked()] == expected, f"step {step}"
        assert [s.agent.id for s in state.shown()] == expected
    assert state.ranked() is state.ranked()  # nothing changed between the two: the same list, not a new sort


def test_an_agent_idle_for_the_whole_sparkline_shows_its_calls_again_once_it_calls():
    now = [1000.0]
    state = ConsoleState(clock=lambda: now[0])
    row = make("idle").data
    state.apply(StateFrame(seq=0, full=True, time=now[0], agents=[row], gone=[]))
    for _ in range(20):  # past the sparkline's span: every slot zero, the agent no longer sampled
        now[0] += 1.0
        state.sample()
    assert list(state.agents["idle"].rate) == [0] * len(state.agents["idle"].rate)
    now[0] += 0.5
    state.apply(StateFrame(seq=1, full=False, time=now[0], agents=[replace(row, calls=row.calls + 5)], gone=[]))
    now[0] += 1.0
    state.sample()
    assert state.agents["idle"].rate[-1] == 5
    assert [a.id for a in state.ranked()] == ["idle"]
