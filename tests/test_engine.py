"""The engine's rules, one test per rule, including the seed's own stories."""

from __future__ import annotations

import json
import math
import tracemalloc

import pytest

from breaker import Config, Guard, IncidentLog


def guard(**changes) -> Guard:
    return Guard(Config().replace(**changes))


def bash(command: str, description: str = "") -> dict:
    args = {"command": command}
    if description:
        args["description"] = description
    return args


# -- the seed's stories ----------------------------------------------------------------------------


def test_seed_echo_cbprobe4_with_changing_description_is_denied_from_the_seventh_call():
    g = Guard()
    verdicts = [g.check("agent-1", "bash", bash("echo cbprobe4", f"Run probe step {i}")) for i in range(1, 11)]
    assert [v.allowed for v in verdicts] == [True] * 6 + [False] * 4
    seventh = verdicts[6]
    assert (seventh.kind, seventh.count, seventh.limit) == ("duplicate", 6, 6)


def test_seed_555_repeats_of_one_query_give_6_allowed_549_denied_and_one_incident_line(tmp_path):
    log_path = tmp_path / "incidents.jsonl"
    g = Guard(Config(incident_log=str(log_path)))
    log = IncidentLog(g.config.incident_log)
    allowed = denied = 0
    for i in range(555):
        v = g.check("agent-a", "web_search", {"query": "qwen3.8 gated deltanet loop"}, now=1000.0 + i)
        log.record_verdict("agent-a", "web_search", v, when=1000.0 + i)
        allowed += v.allowed
        denied += not v.allowed
    assert (allowed, denied) == (6, 549)
    lines = log_path.read_text().splitlines()
    assert len(lines) == 1
    assert '"kind":"duplicate"' in lines[0] and '"agent":"agent-a"' in lines[0]


def test_once_tripped_the_breaker_does_not_lock_other_keys():
    g = Guard()
    for _ in range(6):
        assert g.check("a", "web_search", {"query": "same"}).allowed
    assert not g.check("a", "web_search", {"query": "same"}).allowed
    assert g.check("a", "web_search", {"query": "different"}).allowed
    assert g.check("a", "read", {"path": "/etc/hosts"}).allowed
    assert not g.check("a", "web_search", {"query": "same"}).allowed


# -- rule 1: enabled -------------------------------------------------------------------------------


def test_disabled_guard_allows_everything_and_records_nothing():
    g = guard(enabled=False)
    for _ in range(20):
        v = g.check("a", "bash", bash("ls"))
        assert v.allowed and not v.counted
    assert "a" not in g
    g.config = Config()  # turning it back on starts from a clean slate: nothing was recorded
    assert all(g.check("a", "bash", bash("ls")).allowed for _ in range(6))
    assert not g.check("a", "bash", bash("ls")).allowed


# -- rule 2: exempt and only -----------------------------------------------------------------------


def test_exempt_tools_are_allowed_and_not_counted():
    g = guard(max_calls_per_agent=3)
    for _ in range(50):
        v = g.check("a", "todo_write", {"todos": []})
        assert v.allowed and not v.counted
    assert all(g.check("a", "bash", bash(f"echo {i}")).allowed for i in range(3))  # the cap is untouched


def test_exempt_and_only_match_names_without_regard_to_case_underscore_or_dash():
    g = Guard()
    assert not g.check("a", "TodoWrite", {}).counted  # Claude Code's name for dsh's todo_write
    assert not g.check("a", "ask-user-question", {}).counted
    assert g.check("a", "Bash", bash("ls")).counted


def test_only_limits_the_guard_to_those_tools_and_overrides_exempt():
    g = guard(only=("web_search", "todo_write"), exempt=("todo_write",))
    for _ in range(20):
        assert g.check("a", "bash", bash("ls")).allowed  # not in `only`: never judged
    results = [g.check("a", "todo_write", {"x": 1}).allowed for _ in range(7)]
    assert results == [True] * 6 + [False]  # in `only`, so judged even though exempt lists it


# -- rule 3: interrupt -----------------------------------------------------------------------------


def test_interrupted_agent_is_denied_every_later_call_with_kind_interrupted():
    g = Guard()
    assert g.check("a", "bash", bash("ls")).allowed
    g.interrupt("a", "looping on ls")
    for tool in ("bash", "web_search", "todo_write"):  # exempt tools too: it is the operator's order
        v = g.check("a", tool, {"q": tool})
        assert (v.allowed, v.kind) == (False, "interrupted")
        assert "looping on ls" in v.reason
    assert g.check("b", "bash", bash("ls")).allowed  # other agents are untouched


def test_interrupt_applies_even_when_the_guard_is_disabled_or_paused():
    g = guard(enabled=False)
    g.interrupt("a")
    assert g.check("a", "bash", bash("ls")).kind == "interrupted"
    g.config = Config()
    g.pause()
    assert g.check("a", "bash", bash("ls")).kind == "interrupted"


def test_interrupt_first_deny_is_flagged_once_and_uninterrupt_lifts_it():
    g = Guard()
    g.interrupt("a")
    firsts = [g.check("a", "bash", bash("ls")).first for _ in range(3)]
    assert firsts == [True, False, False]
    assert g.uninterrupt("a")
    assert g.check("a", "bash", bash("ls")).allowed


def test_interrupt_of_an_agent_never_seen_denies_its_first_call():
    g = Guard()
    g.interrupt("session-123", "stop")
    assert g.check("session-123", "read", {"path": "x"}).kind == "interrupted"
    assert g.agent_view("session-123").status == "interrupted"


# -- rule 4: the cap -------------------------------------------------------------------------------


def test_cap_denies_after_max_calls_with_count_and_limit():
    g = guard(max_calls_per_agent=5)
    verdicts = [g.check("a", "web_search", {"query": f"q{i}"}) for i in range(8)]
    assert [v.allowed for v in verdicts] == [True] * 5 + [False] * 3
    assert (verdicts[5].kind, verdicts[5].count, verdicts[5].limit) == ("cap", 5, 5)
    assert [v.first for v in verdicts[5:]] == [True, False, False]


def test_cap_is_permanent_for_the_agent_window_expiry_does_not_free_it():
    g = guard(max_calls_per_agent=5, window=2)
    for i in range(5):
        g.check("a", "read", {"path": str(i)})
    for i in range(100):
        assert g.check("a", "read", {"path": f"new-{i}"}).kind == "cap"
    assert g.check("b", "read", {"path": "0"}).allowed  # per agent


def test_cap_zero_disables_the_cap():
    g = guard(max_calls_per_agent=0)
    assert all(g.check("a", "read", {"path": str(i)}).allowed for i in range(2000))


def test_cap_is_checked_before_the_duplicate_rule():
    g = guard(max_calls_per_agent=6)
    for _ in range(6):
        g.check("a", "bash", bash("ls"))
    assert g.check("a", "bash", bash("ls")).kind == "cap"


def test_raising_the_cap_live_gives_a_capped_agent_new_headroom():
    g = guard(max_calls_per_agent=3)
    for i in range(4):
        g.check("a", "read", {"path": str(i)})
    assert g.check("a", "read", {"path": "x"}).kind == "cap"
    g.config = g.config.replace(max_calls_per_agent=10)
    assert g.check("a", "read", {"path": "x"}).allowed


# -- rule 5: the key -------------------------------------------------------------------------------


def test_argument_order_never_changes_the_key_at_any_depth():
    g = guard(duplicate_limit=2)
    g.check("a", "edit", {"path": "f", "opts": {"x": 1, "y": [{"b": 2, "a": 1}]}})
    g.check("a", "edit", {"opts": {"y": [{"a": 1, "b": 2}], "x": 1}, "path": "f"})
    v = g.check("a", "edit", {"opts": {"x": 1, "y": [{"a": 1, "b": 2}]}, "path": "f"})
    assert v.kind == "duplicate"


def test_list_order_does_change_the_key():
    g = guard(duplicate_limit=1)
    assert g.check("a", "t", {"x": [1, 2]}).allowed
    assert g.check("a", "t", {"x": [2, 1]}).allowed


@pytest.mark.parametrize("name", ["description", "explanation", "reason", "thought", "purpose"])
def test_ignore_args_are_stripped_before_comparing(name):
    g = guard(duplicate_limit=2)
    g.check("a", "bash", {"command": "make", name: "first"})
    g.check("a", "bash", {"command": "make", name: "second"})
    assert g.check("a", "bash", {"command": "make"}).kind == "duplicate"


def test_ignore_args_apply_only_at_the_top_level():
    g = guard(duplicate_limit=1)
    g.check("a", "t", {"inner": {"description": "one"}})
    assert g.check("a", "t", {"inner": {"description": "two"}}).allowed


def test_ignore_args_empty_compares_every_argument():
    g = guard(duplicate_limit=1, ignore_args=())
    g.check("a", "bash", bash("ls", "one"))
    assert g.check("a", "bash", bash("ls", "two")).allowed


def test_same_args_for_different_tools_are_different_keys():
    g = guard(duplicate_limit=1)
    g.check("a", "read", {"path": "x"})
    assert g.check("a", "write", {"path": "x"}).allowed


def test_non_object_args_are_compared_whole():
    g = guard(duplicate_limit=2)
    for args in ("ls", ["a", 1], None, 3.5):
        g.check("a", "t", args)
        g.check("a", "t", args)
        assert g.check("a", "t", args).kind == "duplicate"


@pytest.mark.parametrize(
    "args",
    [
        {"data": b"raw bytes"},
        {"when": object()},
        {"n": 2**80},
        {"s": {1, 2}},
        {1: "non-string key"},
    ],
    ids=["bytes", "object", "huge-int", "set", "int-key"],
)
def test_unserializable_args_fail_open_and_count_toward_the_cap(args):
    g = guard(max_calls_per_agent=10)
    verdicts = [g.check("a", "t", args) for _ in range(10)]
    assert all(v.allowed and v.counted for v in verdicts)  # never a duplicate: they match nothing
    assert g.check("a", "t", args).kind == "cap"
    assert g.agent_view("a").window_fill == 10


def test_circular_args_fail_open():
    args: dict = {}
    args["self"] = args
    g = guard(duplicate_limit=1)
    assert g.check("a", "t", args).allowed
    assert g.check("a", "t", args).allowed


def test_unserializable_call_takes_a_window_slot_that_matches_nothing():
    g = guard(window=2, duplicate_limit=2)
    g.check("a", "t", {"k": 1})
    g.check("a", "t", {"k": 1})
    assert g.check("a", "t", {"k": 1}).kind == "duplicate"
    assert g.check("a", "u", {"b": b""}).allowed  # pushes one {"k":1} out of the 2-slot window
    assert g.check("a", "t", {"k": 1}).allowed


# -- rule 6: duplicates and the window -------------------------------------------------------------


def test_default_six_identical_calls_run_and_the_seventh_is_denied():
    g = Guard()
    results = [g.check("a", "read", {"path": "README.md"}).allowed for _ in range(7)]
    assert results == [True] * 6 + [False]


def test_duplicate_limit_one_denies_the_second_identical_call():
    g = guard(duplicate_limit=1)
    assert g.check("a", "t", {}).allowed
    assert g.check("a", "t", {}).kind == "duplicate"


def test_duplicate_deny_reason_fills_tool_count_and_limit():
    g = guard(duplicate_limit=2, deny_message="no {tool}: {count} of {limit} ({kind}, {agent}) {other}")
    g.check("ag", "web_search", {})
    g.check("ag", "web_search", {})
    assert g.check("ag", "web_search", {}).reason == "no web_search: 2 of 2 (duplicate, ag) {other}"


def test_deny_message_is_never_substituted_into_a_tool_name():
    g = guard(duplicate_limit=1, deny_message="{tool}/{count}")
    g.check("a", "{count}", {})
    assert g.check("a", "{count}", {}).reason == "{count}/1"


def test_window_expiry_lets_old_legitimate_repeats_age_out():
    g = guard(window=10, duplicate_limit=2)
    g.check("a", "read", {"path": "x"})
    g.check("a", "read", {"path": "x"})
    assert g.check("a", "read", {"path": "x"}).kind == "duplicate"
    for i in range(9):
        g.check("a", "read", {"path": f"other-{i}"})
    # the window is the last 10 calls: [x, o0..o8]; the first "x" has aged out
    assert g.check("a", "read", {"path": "x"}).allowed  # -> [o0..o8, x]: the other old "x" leaves too
    assert g.check("a", "read", {"path": "x"}).allowed  # -> [o1..o8, x, x]
    assert g.check("a", "read", {"path": "x"}).kind == "duplicate"


def test_denied_calls_are_never_recorded():
    g = guard(window=8, duplicate_limit=3)
    for _ in range(3):
        g.check("a", "bash", bash("ls"))
    for _ in range(100):
        assert g.check("a", "bash", bash("ls")).kind == "duplicate"
    view = g.agent_view("a")
    assert (view.calls, view.window_fill, view.worst_count) == (3, 3, 3)
    # denied calls pushed nothing out: after 5 new calls the 3 "ls" still fill the window
    for i in range(5):
        assert g.check("a", "read", {"path": str(i)}).allowed
    assert g.check("a", "bash", bash("ls")).kind == "duplicate"
    g.check("a", "read", {"path": "one more"})  # now the oldest "ls" leaves
    assert g.check("a", "bash", bash("ls")).allowed


def test_agents_are_counted_apart():
    g = guard(duplicate_limit=2)
    for agent in ("parent", "sub-1", "sub-2"):
        assert g.check(agent, "t", {}).allowed
        assert g.check(agent, "t", {}).allowed
        assert g.check(agent, "t", {}).kind == "duplicate"


def test_first_flag_marks_only_the_first_deny_of_each_kind_per_agent():
    g = guard(duplicate_limit=1, max_calls_per_agent=3)
    g.check("a", "t", {})
    firsts = [g.check("a", "t", {}).first for _ in range(3)]
    assert firsts == [True, False, False]
    g.check("a", "u", {})
    g.check("a", "v", {})
    cap = [g.check("a", "w", {}) for _ in range(2)]
    assert [(v.kind, v.first) for v in cap] == [("cap", True), ("cap", False)]


# -- hot reload of the config ----------------------------------------------------------------------


def test_replacing_the_config_keeps_counts():
    g = Guard()
    for _ in range(4):
        g.check("a", "t", {})
    g.config = Config(duplicate_limit=4)
    v = g.check("a", "t", {})
    assert (v.kind, v.count, v.limit) == ("duplicate", 4, 4)


def test_lowering_the_limit_below_current_occurrences_reports_the_real_count():
    g = Guard()
    for _ in range(6):
        g.check("a", "t", {})
    g.config = Config(duplicate_limit=2)
    v = g.check("a", "t", {})
    assert (v.count, v.limit) == (6, 2)


def test_shrinking_the_window_live_drops_the_oldest_calls():
    g = guard(window=10, duplicate_limit=2)
    g.check("a", "t", {"k": "old"})
    g.check("a", "t", {"k": "old"})
    for i in range(3):
        g.check("a", "t", {"k": i})
    g.config = g.config.replace(window=3)
    assert g.check("a", "t", {"k": "old"}).allowed  # both "old" calls fell out of a 3-call window
    assert g.agent_view("a").window_fill == 3


def test_changing_exempt_live_applies_to_the_next_call():
    g = guard(duplicate_limit=1)
    g.check("a", "bash", bash("ls"))
    assert not g.check("a", "bash", bash("ls")).allowed
    g.config = g.config.replace(exempt=("bash",))
    assert g.check("a", "bash", bash("ls")).allowed


# -- operator actions and lifecycle ----------------------------------------------------------------


def test_reset_clears_an_agents_counts_and_denies():
    g = guard(duplicate_limit=1, max_calls_per_agent=2)
    g.check("a", "t", {})
    g.check("a", "u", {})
    assert g.check("a", "v", {}).kind == "cap"
    assert g.reset("a")
    view = g.agent_view("a")
    assert (view.calls, view.window_fill, view.denies, view.status) == (0, 0, {}, "ok")
    assert g.check("a", "t", {}).allowed
    assert not g.reset("never-seen")


def test_end_agent_frees_its_state_but_an_operator_interrupt_outlives_it():
    g = guard(duplicate_limit=1)
    g.check("a", "t", {})
    g.check("b", "t", {})
    g.interrupt("b")
    assert g.end_agent("a") and g.end_agent("b")
    assert "a" not in g and "b" not in g
    assert g.check("a", "t", {}).allowed  # a new life: its window starts empty
    assert g.check("b", "t", {}).kind == "interrupted"  # only the operator lifts an interrupt
    assert g.uninterrupt("b") and g.check("b", "t", {}).allowed
    assert not g.end_agent("unknown")


def test_the_engine_says_when_an_agent_goes_away_by_eviction_or_end():
    gone: list[str] = []
    g = Guard(Config(max_agents=2), on_remove=gone.append)
    for agent in ("a", "b", "c"):  # c evicts a
        g.check(agent, "t", {})
    g.end_agent("b")
    g.reset("c")  # a reset keeps the agent
    assert gone == ["a", "b"]
    g.config = g.config.replace(max_agents=1)  # no agent more to evict (only c is left); a's ledger goes
    assert gone == ["a", "b", "a"]


def test_args_nested_deeper_than_the_serializers_limit_are_still_judged():
    g = guard(duplicate_limit=6)
    deep = "[" * 600 + "]" * 600
    verdicts = [g.check("a", "t", json.loads(deep)) for _ in range(20)]
    assert [v.allowed for v in verdicts] == [True] * 6 + [False] * 14
    assert verdicts[-1].kind == "duplicate"
    assert g.check("a", "t", json.loads("[" * 601 + "]" * 601)).allowed  # one level more is another call


def test_circular_args_are_allowed_and_counted_but_never_match():
    g = guard(duplicate_limit=1)
    loop: list = []
    loop.append(loop)
    assert all(g.check("a", "t", loop).allowed for _ in range(3))
    assert g.agent_view("a").calls == 3


def test_exported_state_restores_to_the_same_verdicts():
    a = guard(duplicate_limit=3, window=5, max_calls_per_agent=8)
    for i in (1, 1, 2, 1, 3):
        a.check("x", "t", {"i": i}, now=float(i))
    a.check("x", "t", {"i": 1})  # denied: 1 is there 3 times
    b = guard(duplicate_limit=3, window=5, max_calls_per_agent=8)
    state = a.export_agent("x")
    assert state is not None
    b.restore_agent(state)
    for i in (1, 2, 2, 4, 1, 1, 5):
        assert a.check("x", "t", {"i": i}) == b.check("x", "t", {"i": i})
    assert a.agent_view("x") == b.agent_view("x")
    assert [(k.agent, k.count) for k in a.top_keys()] == [(k.agent, k.count) for k in b.top_keys()]


def test_a_restore_without_windows_keeps_calls_and_denies():
    a = guard(max_calls_per_agent=2)
    for _ in range(3):
        a.check("x", "t", {})
    b = guard(max_calls_per_agent=2)
    state = a.export_agent("x")
    assert state is not None
    b.restore_agent(state, windows=False)
    view = b.agent_view("x")
    assert view is not None and (view.calls, view.window_fill, view.denies) == (2, 0, {"cap": 1})
    assert b.check("x", "t", {}).kind == "cap"


def test_pause_allows_without_recording_and_resume_restores_judging():
    g = guard(duplicate_limit=1)
    g.pause()
    assert all(g.check("a", "t", {}).allowed for _ in range(5))
    g.resume()
    assert g.check("a", "t", {}).allowed
    assert not g.check("a", "t", {}).allowed


def test_tracked_agents_are_bounded_least_recently_active_evicted_first():
    g = guard(max_agents=3)
    for agent in ("a", "b", "c"):
        g.check(agent, "t", {})
    g.check("a", "t", {})  # a is now the most recent
    g.check("d", "t", {})
    assert g.agents() == ["c", "a", "d"]
    g.config = g.config.replace(max_agents=2)
    assert g.agents() == ["a", "d"]


def test_interrupts_survive_the_eviction_of_the_agents_counts():
    g = guard(max_agents=2)
    g.check("a", "t", {})
    g.interrupt("a")
    g.check("b", "t", {})
    g.check("c", "t", {})  # evicts a's counts
    assert "a" not in g
    assert g.check("a", "t", {}).kind == "interrupted"


# -- snapshot --------------------------------------------------------------------------------------


def test_snapshot_shows_calls_window_worst_key_with_preview_trips_and_status():
    g = guard(duplicate_limit=3, window=50)
    g.check("looper", "web_search", {"query": "same thing", "description": "step 1"}, now=10.0)
    for i in range(5):
        g.check("looper", "web_search", {"query": "same thing", "description": f"step {i}"}, now=11.0 + i)
    g.check("calm", "read", {"path": "a"}, now=20.0)
    snap = g.snapshot()
    assert [a.agent for a in snap.agents] == ["calm", "looper"]  # most recently active first
    looper = snap.agents[1]
    assert (looper.calls, looper.window_fill, looper.worst_count) == (3, 3, 3)
    assert looper.worst_tool == "web_search"
    assert looper.worst_preview == 'web_search query="same thing"'  # ignoreArgs are not shown
    assert looper.denies == {"duplicate": 3} and looper.status == "duplicate"
    assert looper.last_seen == 15.0
    calm = snap.agents[0]
    assert (calm.calls, calm.worst_count, calm.worst_preview, calm.status) == (1, 1, "", "ok")
    assert snap.top_keys[0].agent == "looper" and snap.top_keys[0].count == 3
    assert g.checks == 7 and g.denies["duplicate"] == 3


def test_snapshot_top_keys_are_ordered_by_count_across_agents():
    g = guard(duplicate_limit=100)
    for n, agent in ((5, "a"), (9, "b"), (2, "c")):
        for _ in range(n):
            g.check(agent, "t", {"agent": agent})
    assert [(k.agent, k.count) for k in g.snapshot(top=2).top_keys] == [("b", 9), ("a", 5)]


def test_preview_is_short_single_line_and_bounded():
    g = guard(duplicate_limit=100)
    big = {"content": "line\n" * 10_000, "path": "/tmp/x"}
    g.check("a", "write", big)
    g.check("a", "write", big)
    view = g.agent_view("a")
    assert len(view.worst_preview) <= 100 and "\n" not in view.worst_preview


def test_a_capped_agents_status_is_the_kind_its_next_call_meets():
    g = guard(max_calls_per_agent=1)
    g.check("a", "t", {})
    assert g.agent_view("a").status == "cap"


# -- bounded memory --------------------------------------------------------------------------------


def test_a_remembered_call_costs_the_same_whatever_the_size_of_its_args():
    def cost(size: int) -> float:
        g = guard(window=500, duplicate_limit=500, max_calls_per_agent=0)
        g.check("a", "t", {"warm": 1})
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(400):
            g.check("a", "t", {"i": i, "blob": "x" * size})
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return (after - before) / 400

    small, large = cost(10), cost(50_000)
    assert large < 200 and math.isclose(small, large, rel_tol=0.25, abs_tol=16)


def test_verdict_key_is_the_digest_the_window_compares_and_none_when_not_computed():
    from breaker.keys import call_key

    g = guard(duplicate_limit=1, max_calls_per_agent=3)
    args = {"q": "x", "description": "ignored"}
    allowed = g.check("a", "web_search", args)
    allowed_key = g.checked_key  # a plain allowed call's verdict is shared: the guard holds its key
    denied = g.check("a", "web_search", {"q": "x"})
    assert allowed.key is None and allowed.counted
    assert allowed_key == denied.key == call_key("web_search", {"q": "x"}) is not None
    assert g.check("a", "todo_write", {}).key is None  # exempt: not judged
    assert g.check("a", "t", {"b": b""}).key is None  # unserializable
    g.check("a", "t", {"n": 1})
    assert g.check("a", "t", {"n": 2}).kind == "cap" and g.check("a", "t", {"n": 3}).key is None


def test_a_plain_allowed_call_gets_the_verdict_shared_by_its_count_and_an_agents_own_limit_gets_one_of_its_own():
    g = guard(duplicate_limit=3)
    first = g.check("a", "read", {"path": "/x"})
    assert first == (True, None, "", 1, 3, False, True, None, "", None)
    assert g.check("b", "read", {"path": "/y"}) is first  # another agent, another call, the same count: one object
    second = g.check("a", "read", {"path": "/x"})
    assert second.count == 2 and second is not first and g.checked_key is not None
    g.check("c", "read", {"path": "/z"})
    g.override("c", {"duplicateLimit": 2})
    own = g.check("c", "read", {"path": "/x"})
    assert (own.count, own.limit, own.key) == (1, 2, g.checked_key) and own.key is not None
