"""Detection v3's tallies across a restart (issue 23): polls in a row, a cycle through a wait and wordings in a row
are saved with the agent's state, so a loop that rewords itself, then a restart, gets no more tries than without
it — in the engine, through the state file, and with a real guard killed with SIGKILL."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breaker import Config
from breaker.engine import AgentState, Guard, Verdict
from breaker.keys import result_digest
from breaker.store import StateStore, _decode_agent, _records, encode_agent, load
from tests.conftest import Conn, request

REC = Config.with_preset("recommended")
POLL = "gh run view 123456 --json status,conclusion"
QUERIES = [  # one search in six wordings: case, order, spacing, hyphens
    "vllm tool parser repeated calls",
    "repeated calls vllm tool parser",
    "vLLM tool-parser repeated calls",
    "VLLM  Tool Parser Repeated Calls",
    "tool parser vllm calls repeated",
    "vllm tool parser repeated-calls",
]

Call = tuple[str, Any, float | None, str | None]  # tool, args, time, its result (None: none reported)


def outcome(v: Verdict) -> str:
    """'.' allowed, 'w' allowed with a warning, or the deny's kind's first letter in capitals."""
    if v.allowed:
        return "w" if v.warning else "."
    return (v.kind or "?")[0].upper()


def judge(guard: Guard, calls: list[Call], first_id: int = 0) -> str:
    out = []
    for i, (tool, args, now, answer) in enumerate(calls, first_id):
        v = guard.check("a", tool, args, now, call_id=i)
        out.append(outcome(v))
        if v.allowed and answer is not None:
            guard.result("a", result_digest(answer), call_id=i)
    return "".join(out)


def through_the_file(state: AgentState) -> AgentState:
    """The state as a state file gives it back."""
    [(_at, _kind, _ident, raw, _end)] = list(_records(encode_agent("a", state, "dsh", None)))
    return _decode_agent("a", raw).state


def restarted(config: Config, calls: list[Call], at: int) -> tuple[str, str]:
    """The verdicts of `calls` by one guard, and by one that is restarted (export, the file, restore) before call
    `at`: (without the restart, with it)."""
    once = Guard(config)
    before = judge(once, calls[:at])
    state = once.export_agent("a")
    assert state is not None
    again = Guard(config)
    again.restore_agent(through_the_file(state))
    assert again.export_agent("a") == state  # nothing the rules count is left out
    return before + judge(once, calls[at:], at), before + judge(again, calls[at:], at)


# -- the engine ------------------------------------------------------------------------------------


def test_a_search_reworded_twice_then_a_restart_is_still_stopped_at_its_fourth_wording():
    calls: list[Call] = [("web_search", {"query": q}, None, None) for q in QUERIES]
    without, with_restart = restarted(REC, calls, 2)
    assert without == with_restart == "..wRRR"


def test_a_grep_respelled_across_a_restart_is_stopped_at_the_same_call():
    spellings = ['grep -rn "handleAuth" src/', "grep -rni handleAuth ./src/", "grep -Rn 'handleAuth' src"]
    calls: list[Call] = [("bash", {"command": c}, None, None) for c in spellings * 2]
    for at in range(1, len(calls)):
        without, with_restart = restarted(REC, calls, at)
        assert with_restart == without == "..wRRC", at  # the sixth completes two rounds of A-B-C: cycle


def test_polls_then_a_restart_are_stopped_after_poll_limit_polls_in_all():
    config = REC.updated({"pollLimit": 4})
    calls: list[Call] = [("bash", {"command": f"sleep 30 && {POLL}"}, None, "queued")] * 7
    for at in range(1, len(calls)):
        without, with_restart = restarted(config, calls, at)
        assert with_restart == without == "....wRR", at


def test_paced_polls_then_a_restart_are_stopped_after_poll_limit_polls_in_all():
    config = REC.updated({"pollLimit": 3})
    calls: list[Call] = [("bash", {"command": POLL}, 1000.0 + 40 * i, "queued") for i in range(6)]
    without, with_restart = restarted(config, calls, 3)
    assert with_restart == without == "...wRR"


def test_a_cycle_through_a_wait_is_still_a_poll_after_a_restart():
    # a check, then `sleep 30`, then the check again: no times, the sleep says it waits (the check does not)
    calls: list[Call] = [("BashOutput", {"bash_id": "b2"}, None, None), ("Bash", {"command": "sleep 30"}, None, None)]
    calls = calls * 4
    without, with_restart = restarted(REC, calls, 4)
    assert with_restart == without == "." * 8


def test_a_restore_without_windows_starts_polls_and_wordings_again():
    g = Guard(REC)
    judge(g, [("web_search", {"query": q}, None, None) for q in QUERIES[:2]])
    state = g.export_agent("a")
    assert state is not None and state.reword_key is not None and state.reword_run == 2
    h = Guard(REC)
    h.restore_agent(state, windows=False)  # digests of another hash seed: they would match nothing
    restored = h.export_agent("a")
    assert restored is not None and restored.reword_key is None and restored.reword_run == 0


TRIED: list[tuple[str, Any]] = [
    ("bash", {"command": "ls src"}),
    ("bash", {"command": "ls -la ./src/"}),
    ("bash", {"command": "grep -rn foo src"}),
    ("bash", {"command": "grep -Rni 'foo' ./src"}),
    ("bash", {"command": f"sleep 30 && {POLL}"}),
    ("bash", {"command": "sleep 30"}),
    ("BashOutput", {"bash_id": "b2"}),
    ("web_search", {"query": "qwen3.8 release notes"}),
    ("web_search", {"query": "Release-Notes qwen 3.8"}),
    ("write", {"path": "a.py"}),
    ("read", {"data": {1, 2}}),  # args no JSON can carry: a call the guard cannot key
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(TRIED) - 1), st.sampled_from([1.0, 5.0, 40.0]), st.sampled_from(["same", None])),
        min_size=1,
        max_size=40,
    ),
    st.data(),
)
def test_after_a_restart_at_any_call_every_later_call_is_judged_as_without_it(seq, data):
    config = REC.updated({"maxCallsPerAgent": 0, "pollLimit": 4})
    calls: list[Call] = []
    now = 0.0
    for i, (n, gap, answer) in enumerate(seq):
        now += gap
        calls.append((*TRIED[n], now, answer if answer is None else f"{answer} {i % 3}"))
    at = data.draw(st.integers(1, len(calls)))
    without, with_restart = restarted(config, calls, at)
    assert with_restart == without


# -- the state file ----------------------------------------------------------------------------------


def save(path: Path, state: AgentState) -> None:
    store = StateStore(path, seed=1)
    store.open()
    done = threading.Event()
    store.save([("a", state, "dsh", None)], done.set)
    assert done.wait(10)
    store.close()


def rewording() -> AgentState:
    """An agent two wordings into a search, with two polls after them (a poll leaves the wordings be)."""
    g = Guard(REC.updated({"pollLimit": 4}))
    sleep = ("bash", {"command": f"sleep 30 && {POLL}"}, None, None)
    judge(g, [sleep, *[("web_search", {"query": q}, None, None) for q in QUERIES[:2]], sleep, sleep])
    state = g.export_agent("a")
    assert state is not None and (state.polls, state.polling, state.reword_run, state.reword_mixed) == (
        2,
        True,
        2,
        True,
    )
    return state


def test_polls_and_wordings_in_a_row_read_back_the_same_from_the_state_file(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    save(path, state := rewording())
    loaded, _ = load(path)
    assert loaded.agents[0].state == state and not loaded.notes


NEW_FIELDS = ("polls", "polling", "reword_key", "reword_run", "reword_first", "reword_mixed")


def agent_record(state: AgentState, drop: tuple[str, ...] = (), **changes: Any) -> bytes:
    """The agent's record as the state file holds it, without the fields `drop`, with `changes` to its JSON."""
    [(_at, _kind, _ident, raw, _end)] = list(_records(encode_agent("a", state, "dsh", None)))
    body = orjson.loads(raw)
    assert set(NEW_FIELDS) <= body.keys()
    body.update(changes)
    return orjson.dumps({k: v for k, v in body.items() if k not in drop})


def test_a_state_file_from_before_polls_and_wordings_were_kept_loads_as_it_did(tmp_path: Path):
    state = rewording()
    loaded = _decode_agent("a", memoryview(agent_record(state, drop=NEW_FIELDS))).state
    assert (loaded.polls, loaded.polling, loaded.reword_key, loaded.reword_run) == (0, False, None, 0)
    assert (loaded.calls, loaded.ring, loaded.recent, loaded.previews) == (
        state.calls,
        state.ring,
        state.recent,
        state.previews,
    )
    # its next wordings count from the restart, as they did before they were kept
    g = Guard(REC)
    g.restore_agent(loaded)
    assert judge(g, [("web_search", {"query": q}, None, None) for q in QUERIES[2:5]], 20) == "..w"


def bad(tmp_path: Path, **changes: Any) -> tuple[Any, AgentState]:
    """A state file holding another agent, then `a` with `changes` to its record: what loading it gives."""
    from breaker.store import _AGENT, _frame

    state = rewording()
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1)
    store.open()
    done = threading.Event()
    other = AgentState("b", 3, {}, [7, 8, 9], {}, "read", 1.0)
    store.save([("b", other, "", None)], done.set)
    assert done.wait(10)
    store.close()
    with open(path, "ab") as f:
        f.write(_frame(_AGENT, "a", agent_record(state, **changes)))
    loaded, _ = load(path)
    assert loaded.problem is None
    assert [r.state.agent for r in loaded.agents] == ["b", "a"]
    assert loaded.agents[0].state == other  # the other agent: as saved
    return loaded, state


def test_a_bad_poll_count_in_the_state_file_is_named_and_costs_only_that_count(tmp_path: Path):
    loaded, state = bad(tmp_path, polls="lots", polling=3)
    a = loaded.agents[1].state
    assert (a.polls, a.polling) == (0, False)
    assert (a.calls, a.ring, a.reword_key, a.reword_run) == (state.calls, state.ring, state.reword_key, 2)
    (polls,) = [n for n in loaded.notes if "polls" in n]
    assert "'a'" in polls and "'lots'" in polls and "a count" in polls and str(tmp_path) in polls
    assert any("polling" in n and "true or false" in n for n in loaded.notes)


@pytest.mark.parametrize("value", [-1, 1.5, True, None, [3], 18446744073709551615, 1e29], ids=repr)
def test_a_poll_count_that_is_no_count_is_named_whatever_it_holds(tmp_path: Path, value: Any):
    loaded, state = bad(tmp_path, polls=value)
    a = loaded.agents[1].state
    assert a.polls == 0 and (a.polling, a.reword_run, a.calls) == (True, 2, state.calls)
    (note,) = loaded.notes
    assert "'a'" in note and "polls" in note and "a count" in note


def test_a_bad_wording_field_in_the_state_file_drops_only_the_reworded_rules_state(tmp_path: Path):
    loaded, state = bad(tmp_path, reword_run=-2, reword_key="123")
    a = loaded.agents[1].state
    assert (a.reword_key, a.reword_run, a.reword_first, a.reword_mixed) == (None, 0, None, False)
    assert (a.calls, a.ring, a.polls, a.previews) == (state.calls, state.ring, state.polls, state.previews)
    assert any("reword_run" in n and "-2" in n and "start again" in n for n in loaded.notes)
    assert any("reword_key" in n and "64-bit" in n for n in loaded.notes)


def test_a_long_bad_value_is_cut_short_in_the_note(tmp_path: Path):
    loaded, _state = bad(tmp_path, polls="x" * 10_000)
    (note,) = loaded.notes
    assert "polls" in note and len(note) < 400


# -- a real guard, killed ----------------------------------------------------------------------------


def check(i: int, agent: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"op": "check", "id": i, "agent": agent, "tool": tool, "args": args}


LAYER = "- id: circuit-breaker\n  config:\n    preset: recommended\n    pollLimit: 3\n"


def test_a_guard_killed_with_sigkill_mid_reword_denies_the_reworded_call_at_the_same_count(guard_factory):
    calls = [("searcher", "web_search", {"query": q}) for q in QUERIES[:4]]
    calls += [("poller", "bash", {"command": f"sleep 30 && {POLL}"})] * 6
    # searcher: two wordings before the kill, two after; poller: three calls (two polls) before, three after
    before = [*calls[:2], *calls[4:7]]
    after = [*calls[2:4], *calls[7:]]

    def verdicts(conn: Conn, part: list[tuple[str, str, dict[str, Any]]], first: int) -> list[tuple[Any, ...]]:
        replies = [conn.ask(check(first + i, agent, tool, args)) for i, (agent, tool, args) in enumerate(part)]
        return [(r["decision"], r.get("kind"), r.get("count")) for r in replies]

    steady = guard_factory(patch_text=LAYER)
    expected = verdicts(Conn(steady.socket), before + after, 0)
    g = guard_factory(patch_text=LAYER)
    seen = verdicts(Conn(g.socket), before, 0)
    # a save holding every call above is on disk before an operator change's reply
    assert request(g.operator, {"op": "pause", "id": 1})["ok"]
    assert request(g.operator, {"op": "resume", "id": 2})["ok"]
    g.kill9()
    g.start()
    seen += verdicts(Conn(g.socket), after, 100)
    assert seen == expected
    # the fourth wording is denied as reworded, three wordings tried before it; the poller's fourth poll too
    assert expected[6] == ("deny", "reworded", 3)
    assert expected[-1][:2] == ("deny", "repeat")
