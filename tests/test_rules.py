"""The rules beyond the seed's: repeats in a row, cycles, warnings, progress, per-tool overrides."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breaker import Config
from breaker.engine import Guard, Verdict
from breaker.keys import result_digest

LS = {"command": "ls"}


def calls(guard: Guard, seq: str, agent: str = "a", tool: str = "bash") -> list[Verdict]:
    """One call per letter: the letter is the command."""
    return [guard.check(agent, tool, {"command": c}) for c in seq]


def outcome(v: Verdict) -> str:
    """'.' allowed, 'w' allowed with a warning, or the deny's kind's first letter in capitals."""
    if v.allowed:
        return "w" if v.warning else "."
    return (v.kind or "?")[0].upper()


def run(guard: Guard, seq: str, **kw) -> str:
    return "".join(map(outcome, calls(guard, seq, **kw)))


# -- the seed preset is the seed ------------------------------------------------------------------


def test_the_seed_preset_warns_never_and_denies_only_duplicates_and_caps():
    g = Guard(Config())
    assert run(g, "a" * 8) == "......DD"
    assert g.warnings == 0 and g.denies["repeat"] == g.denies["cycle"] == 0
    assert run(Guard(Config()), "ab" * 8) == "." * 12 + "DDDD"


# -- repeats in a row -----------------------------------------------------------------------------


def test_the_repeat_rule_denies_the_call_after_the_limit_in_a_row():
    g = Guard(Config(repeat_limit=3))
    assert run(g, "aaaaa") == "...RR"
    v = g.check("a", "bash", {"command": "a"})
    assert (v.kind, v.count, v.limit, v.rule) == ("repeat", 3, 3, "repeat")


def test_a_different_call_in_between_breaks_the_run():
    g = Guard(Config(repeat_limit=2))
    assert run(g, "aabaab") == "......"
    assert run(g, "bb") == ".R"  # "b" then "b" then "b": its third in a row


def test_a_denied_repeat_does_not_lengthen_the_run_and_a_new_call_resets_it():
    g = Guard(Config(repeat_limit=2, duplicate_limit=100))
    assert run(g, "aaaa") == "..RR"
    assert run(g, "baa") == "..."  # after "b", "a" may run twice in a row again


def test_the_repeat_rule_is_off_at_zero():
    assert run(Guard(Config(repeat_limit=0, duplicate_limit=100)), "a" * 50) == "." * 50


# -- cycles ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seq", "period"),
    [("ab", 2), ("abc", 3), ("abcd", 4)],
)
def test_a_cycle_is_denied_at_the_call_that_completes_cycle_limit_rounds(seq, period):
    g = Guard(Config(cycle_limit=3, duplicate_limit=100))
    got = run(g, seq * 4)
    assert got == "." * (3 * period - 1) + "C" * (period + 1)  # the call completing the third round is denied
    assert g.denies["cycle"] == period + 1


@pytest.mark.parametrize(
    ("seq", "allowed"),
    [("ab", 4), ("abc", 5), ("abcd", 7)],  # A-B-A-B-A: three repeats; A-B-C-A-B-C; A-B-C-D-A-B-C-D
)
def test_a_cycle_is_denied_once_three_calls_in_a_row_repeated_and_not_before_it_completes_its_rounds(seq, allowed):
    g = Guard(Config(cycle_limit=2, duplicate_limit=100))
    assert run(g, seq * 3) == "." * allowed + "C" * (3 * len(seq) - allowed)


def test_a_cycle_of_three_calls_is_denied_as_its_second_round_completes_and_warned_on_the_call_before():
    # syzkaller-aflow-grepper-three-expression-cycle: three greps, then the same three again in the same order
    g = Guard(Config.with_preset("recommended"))
    assert run(g, "abcabc") == "....wC"


def test_a_cycle_longer_than_the_period_looked_for_is_not_a_cycle():
    g = Guard(Config(cycle_limit=2, cycle_period=3, duplicate_limit=100))
    assert run(g, "abcd" * 4) == "." * 16


def test_a_repeated_block_of_one_call_is_the_repeat_rules_not_a_cycle():
    g = Guard(Config(cycle_limit=1, duplicate_limit=100))
    assert run(g, "a" * 10) == "." * 10
    g = Guard(Config(cycle_limit=1, duplicate_limit=100))
    assert run(g, "aabb" * 3) == "......" + "C" * 6  # a cycle of period 4 (of which "aa" is part), 3 repeats


def test_varied_work_is_not_a_cycle():
    g = Guard(Config(cycle_limit=2, duplicate_limit=100))
    assert run(g, "abcabdabeacbdcebda") == "." * 18


# -- warnings -------------------------------------------------------------------------------------


def test_a_warning_comes_before_each_rules_first_deny():
    g = Guard(Config.with_preset("recommended"))
    assert run(g, "aaaa") == ".wRR"  # two in a row allowed, the second warned
    g = Guard(Config.with_preset("recommended"))
    assert run(g, "ab" * 4) == "...wCCCC"  # two rounds allowed, the last call of them warned
    g = Guard(Config.with_preset("recommended"))
    assert run(g, "abacadaeafagah") == "..........w.D."  # the sixth "a" warned, the seventh denied


def test_the_warning_names_the_rule_its_tally_and_limit_and_the_tool():
    g = Guard(Config(repeat_limit=3, repeat_warn=2))  # the last two of the three allowed in a row
    calls(g, "a")
    v = g.check("a", "bash", {"command": "a"})
    assert v.allowed and v.counted and (v.rule, v.count, v.limit) == ("repeat", 2, 3)
    assert "(repeat)" in v.warning and "bash" in v.warning and "number 2 of the 3 identical calls in a row" in v.warning
    assert g.warnings == 1


def test_the_warning_text_is_the_configured_one_filled_in_one_pass():
    g = Guard(Config(duplicate_warn=6, warn_message="{tool}:{rule}:{count}/{limit}"))
    v = g.check("a", "{count}", {})
    assert v.warning == "{count}:duplicate:1/6"


def test_the_cap_warns_from_cap_warn_on():
    g = Guard(Config(max_calls_per_agent=5, cap_warn=2))
    assert run(g, "abcdef") == "...wwC"  # the last two calls it allows are warned; "C" is the cap's kind
    v = g.check("a", "bash", {"command": "z"})
    assert v.kind == "cap"


def test_a_warning_is_counted_per_agent_and_shown_in_its_view():
    g = Guard(Config(repeat_limit=3, repeat_warn=1))
    calls(g, "aaa")
    view = g.agent_view("a")
    assert view is not None and view.status == "warned" and view.rule == "repeat" and view.warns == {"repeat": 1}
    calls(g, "a")
    view = g.agent_view("a")
    assert view is not None and view.status == "repeat" and view.rule == "repeat" and view.denies == {"repeat": 1}
    calls(g, "b")
    view = g.agent_view("a")
    assert view is not None and view.status == "ok" and view.rule == ""


# -- progress -------------------------------------------------------------------------------------


def poll(guard: Guard, results: list[str], agent: str = "a") -> str:
    """The same call once per result, each result reported before the next call."""
    out = []
    for i, result in enumerate(results):
        v = guard.check(agent, "bash", {"command": "gh run view"}, call_id=f"c{i}")
        out.append(outcome(v))
        if v.allowed:
            guard.result(agent, result_digest(result), call_id=f"c{i}")
    return "".join(out)


def test_a_poll_whose_result_changes_every_time_is_never_stopped():
    g = Guard(Config.with_preset("recommended"))
    assert "R" not in poll(g, [f"in progress {i}" for i in range(40)]).upper().replace("W", "")
    assert g.denies["repeat"] == g.denies["duplicate"] == 0


def test_a_poll_spinning_on_the_same_result_is_stopped():
    g = Guard(Config.with_preset("recommended"))
    assert poll(g, ["queued"] * 5) == ".wRRR"


def test_a_poll_that_stops_progressing_is_stopped_counted_from_its_last_change():
    g = Guard(Config.with_preset("recommended"))
    # the second call is warned (nothing says yet that it progresses); then each new result starts
    # the count again, and once the answer stops changing, two more calls are allowed
    assert poll(g, ["1", "2", "3", "4", "done", "done", "done", "done"]) == ".w....wR"


def test_an_identical_edit_that_succeeded_then_fails_is_no_progress_and_is_denied_at_its_third_call():
    # openagents-fm-simple-edit-same-edit-repeated (out-of-sample, 2026-12-03): "success", then "Text not found"
    edit = {"path": "config.txt", "old_text": "DEBUG=false", "new_text": "DEBUG=true"}
    answers = ["success - Edited config.txt"] + ["failed - Text not found in config.txt"] * 4

    def edits(g: Guard) -> str:
        out = ""
        for i, answer in enumerate(answers):
            v = g.check("a", "edit_file", edit, call_id=i)
            out += outcome(v)
            if v.allowed:
                g.result("a", result_digest(answer), call_id=i)
        return out

    assert edits(Guard(Config.with_preset("recommended"))) == ".wRRR"
    # a tool's own `progress` still wins, and a tool that does not write keeps it
    config = Config.from_mapping({"preset": "recommended", "tools": {"edit_file": {"progress": True}}})
    assert edits(Guard(config)) == ".w.wR"
    assert poll(Guard(Config.with_preset("recommended")), [str(i) for i in range(6)]).count("R") == 0


def test_without_progress_a_changing_result_changes_nothing():
    g = Guard(Config(repeat_limit=3))
    assert poll(g, [str(i) for i in range(5)]) == "...RR"


def test_a_result_that_never_comes_counts_as_today():
    g = Guard(Config.with_preset("recommended"))
    assert run(g, "aaaa") == ".wRR"


def test_a_result_is_found_by_tool_and_args_when_there_is_no_call_id():
    g = Guard(Config.with_preset("recommended"))
    out = []
    for i in range(10):
        v = g.check("a", "run_shell_command", {"command": "date"})
        out.append(outcome(v))
        found, _warning = g.result("a", result_digest(str(i)), tool="run_shell_command", args={"command": "date"})
        assert found
    assert "R" not in "".join(out) and "D" not in "".join(out)


def test_result_hands_back_the_calls_warning_once():
    g = Guard(Config.with_preset("recommended"))
    for i in range(2):
        v = g.check("a", "bash", LS, call_id=i)
    assert v.warning
    assert g.result("a", "x", call_id=1) == (True, v.warning)
    assert g.result("a", "x", call_id=1) == (False, "")  # already reported
    assert g.result("a", "x", call_id=0) == (True, "")
    assert g.result("nobody", "x", call_id=0) == (False, "")


def test_progress_can_be_switched_on_for_one_tool():
    config = Config.from_mapping({"repeatLimit": 2, "tools": {"Web-Fetch": {"progress": True}}})
    g = Guard(config)
    out = ""
    for i in range(6):
        for tool in ("web_fetch", "bash"):
            v = g.check("a", tool, LS, call_id=f"{tool}{i}")
            out += outcome(v)
            if v.allowed:
                g.result("a", str(i), call_id=f"{tool}{i}")
    assert out[0::2] == "......"  # web_fetch: progressing
    assert out[1::2] == "......"  # bash alternates with web_fetch: never in a row
    g = Guard(config)
    assert poll(g, [str(i) for i in range(4)]) == "..RR"  # bash on its own: progress is off for it


# -- stalls: calls of one tool in a row that all get the same result -------------------------------


def stall(guard: Guard, calls: list[tuple[str, str, str]], agent: str = "a") -> str:
    """(tool, args text, result) per call; each result reported by call id before the next call."""
    out = []
    for i, (tool, text, result) in enumerate(calls):
        v = guard.check(agent, tool, {"actions": text}, call_id=i)
        out.append(outcome(v))
        if v.allowed:
            guard.result(agent, result_digest(result), call_id=i)
    return "".join(out)


def test_a_tool_stuck_on_one_result_is_stopped_whatever_its_args():
    g = Guard(Config(stall_limit=4, stall_warn=1))
    page = "the same page"
    assert stall(g, [("browse", f"click({i}) noop({i})", page) for i in range(7)]) == "...wSSS"
    v = g.check("a", "browse", {"actions": "something else"})
    assert (v.kind, v.count, v.limit) == ("stall", 4, 4)
    assert stall(g, [("bash", "ls", "x")]) == "."  # another tool is not stalled


def test_a_new_result_or_another_tool_in_between_ends_the_stall():
    g = Guard(Config(stall_limit=3))
    calls = [("browse", "0", "same"), ("browse", "1", "same"), ("browse", "2", "new")]
    calls += [("browse", "3", "new"), ("browse", "4", "new"), ("read", "x", "new")]
    calls += [("browse", "5", "new"), ("browse", "6", "new"), ("browse", "7", "new")]
    assert stall(g, calls) == "." * 9
    assert stall(g, [("browse", "8", "new")]) == "S"  # three in a row got "new"


def test_calls_without_results_never_stall():
    g = Guard(Config(stall_limit=2))
    assert run(g, "abcdefgh", tool="browse") == "." * 8


def test_recommended_stops_the_stuck_browser_and_lets_five_stalled_actions_recover():
    g = Guard(Config.with_preset("recommended"))
    stuck = [("browse", f"try {i}", "page") for i in range(8)]
    assert stall(g, stuck) == "......wS"  # stallLimit 7: the seventh try warned, the eighth denied
    g = Guard(Config.with_preset("recommended"))
    recovers = [("browse", f"try {i}", "page") for i in range(5)] + [("browse", "the fix", "next page")]
    assert stall(g, recovers) == "......"  # its sixth try gets through, not even warned: the deny was two away


# -- per-tool overrides ---------------------------------------------------------------------------


def test_a_per_tool_duplicate_limit_applies_to_that_tool_only_matched_as_exempt_is():
    g = Guard(Config.from_mapping({"tools": {"BASH": {"duplicateLimit": 2}}}))
    assert run(g, "aba") == "..D".replace("D", ".")  # two "a" allowed
    assert run(g, "a") == "D"
    assert run(g, "aaa", tool="read") == "..."


def test_a_per_tool_cap_caps_that_tools_calls_per_agent():
    g = Guard(Config.from_mapping({"tools": {"web_search": {"maxCalls": 3, "maxCallsWarn": 1}}}))
    assert run(g, "abcd", tool="web_search") == "..wC"
    v = g.check("a", "web_search", {"command": "e"})
    assert (v.kind, v.count, v.limit) == ("cap", 3, 3)
    assert run(g, "abcd", tool="bash") == "...."  # other tools are not capped
    assert run(g, "ab", agent="b", tool="web_search") == ".."  # per agent


def test_a_per_tool_repeat_limit_overrides_the_presets():
    g = Guard(Config.from_mapping({"preset": "recommended", "tools": {"bash": {"repeatLimit": 5}}}))
    assert run(g, "a" * 6) == "....wR"
    assert run(g, "a" * 4, tool="read") == ".wRR"


# -- restarts -------------------------------------------------------------------------------------


def test_export_and_restore_keep_every_rules_state():
    config = Config.from_mapping({"preset": "recommended", "tools": {"web_search": {"maxCalls": 3}}})
    g = Guard(config)
    poll(g, ["1", "2", "2"])
    calls(g, "ab", tool="web_search")
    state = g.export_agent("a")
    assert state is not None
    h = Guard(config)
    h.restore_agent(state)
    assert h.export_agent("a") == state
    # both go on the same way
    assert poll(g, ["2", "2"]) == poll(h, ["2", "2"])
    assert run(g, "cd", tool="web_search") == run(h, "cd", tool="web_search") == ".C"


def test_a_restore_without_windows_keeps_the_tallies_and_per_tool_calls_but_no_digests():
    config = Config.from_mapping({"repeatLimit": 3, "repeatWarn": 2, "tools": {"web_search": {"maxCalls": 2}}})
    g = Guard(config)
    calls(g, "aa")
    calls(g, "b", tool="web_search")
    state = g.export_agent("a")
    assert state is not None and state.warns == {"repeat": 1}
    h = Guard(config)
    h.restore_agent(state, windows=False)
    restored = h.export_agent("a")
    assert restored is not None
    assert restored.warns == {"repeat": 1} and restored.tool_calls == {"websearch": 1}
    assert restored.last_key is None and restored.before is None and restored.ring == []


@pytest.mark.parametrize(
    ("commands", "text", "status"), [("lll", "deny:repeat", "repeat"), ("ll", "warn:repeat", "warned")]
)
def test_an_agents_last_outcome_is_a_pair_in_memory_and_its_old_text_in_the_state_file(commands, text, status):
    import orjson

    from breaker import store

    config = Config.with_preset("recommended")
    g = Guard(config)
    calls(g, commands)
    state = g.export_agent("a")
    assert state is not None and state.last == tuple(text.split(":"))
    [(_at, _kind, _ident, raw, _end)] = list(store._records(store.encode_agent("a", state, "dsh", None)))
    body = orjson.loads(raw)
    assert body["last"] == text  # what a state file from before the pair held, and holds still
    restored = store._decode_agent("a", memoryview(orjson.dumps(body))).state
    assert restored == state
    h = Guard(config)
    h.restore_agent(restored)
    view = h.agent_view("a")
    assert view is not None and (view.status, view.rule) == (status, "repeat")


def test_memory_per_agent_stays_bounded_whatever_the_calls_and_results():
    g = Guard(Config.from_mapping({"preset": "recommended", "window": 20}))
    for i in range(2000):
        v = g.check("a", "bash", {"command": str(i % 50), "blob": "x" * 1000}, call_id=i)
        if v.allowed and i % 3:
            g.result("a", result_digest(i), call_id=i)
    state = g.export_agent("a")
    assert state is not None
    assert len(state.ring) == 20
    assert len(state.before or {}) <= 20 and len(state.results or {}) <= 20
    assert len(g._agents["a"].pending or {}) <= 64


# -- properties -----------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=60), st.integers(2, 8))
def test_under_recommended_every_first_deny_follows_a_warning(seq, period):
    g = Guard(Config.with_preset("recommended", cycle_period=period, max_calls_per_agent=0))
    warned = False
    for v in calls(g, "".join(seq)):
        if v.warning:
            warned = True
        if not v.allowed:
            assert warned, (seq, v)
            break


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=60))
def test_the_seed_preset_gives_the_seeds_verdicts_whatever_the_calls(seq):
    text = "".join(seq)
    new = run(Guard(Config.from_mapping({"preset": "seed"})), text)
    # the seed's rule, counted by hand: the n-th identical call in the window is denied past the limit
    counts: dict[str, int] = {}
    expected = ""
    for c in text:
        if counts.get(c, 0) >= 6:
            expected += "D"
        else:
            counts[c] = counts.get(c, 0) + 1
            expected += "."
    assert new == expected


def test_a_longer_cycle_period_set_while_an_agent_runs_catches_its_longer_cycle_as_a_guard_started_with_it():
    # Each agent's cycle rule makes its lists again for the new period at its next call: without that, its last
    # calls would stay two long and a cycle of three would never be seen.
    changed = Guard(Config(cycle_limit=2, cycle_period=2, duplicate_limit=100))
    assert run(changed, "xy") == ".."
    changed.config = changed.config.replace(cycle_period=3)
    fresh = Guard(Config(cycle_limit=2, cycle_period=3, duplicate_limit=100))
    run(fresh, "xy")
    assert run(changed, "abc" * 3) == run(fresh, "abc" * 3)
    assert "C" in run(changed, "abc" * 2)


# -- the cycle rule's last calls, read without a search (engine: _Agent.clean) ----------------------------------------
# A call whose key is new to the window is none of the agent's last calls only while each of those was kept in the
# window as itself: a deny, a poll and a window shorter than cyclePeriod each break that. Each script below was
# found by comparing an engine without one of those cases against one that searches the list every time.


def scripted(script: list[tuple[str, str, float]], **config) -> str:
    g = Guard(Config.with_preset("recommended", duplicate_limit=100, max_calls_per_agent=0, **config))
    out = []
    for tool, text, t in script:
        args = {"query": text} if tool == "web_search" else {"command": text}
        out.append(outcome(g.check("a", tool, args, t)))
    return "".join(out)


def test_a_call_denied_as_a_rewording_is_still_among_the_last_calls_and_its_return_continues_a_cycle():
    script = [
        ("web_search", "beta alpha", 81.5),
        ("web_search", "alpha-beta", 161.5),
        ("web_search", "alpha beta", 162.0),  # the third wording: denied, never in the window
        ("bash", "gh run view 1", 242.0),
        ("web_search", "alpha beta", 282.5),  # new to the window, but two calls back: a cycle of two, warned
        ("bash", "gh run view 1", 403.0),
    ]
    assert scripted(script, cycle_limit=1, cycle_period=4, reword_limit=2, window=5, poll_limit=0) == ".wR..w"


def test_a_polls_key_stays_among_the_last_calls_after_its_first_call_has_left_the_window():
    script = [
        ("web_search", "Alpha Beta", 242.5),
        ("web_search", "delta", 243.0),
        ("web_search", "delta", 243.5),
        ("web_search", "Alpha Beta", 283.5),  # 41 s after its first: a poll, kept in the window as no key
        ("web_search", "gamma", 323.5),  # its first call leaves the window of four
        ("web_search", "Alpha Beta", 324.0),  # new to the window, two calls after the poll
        ("web_search", "gamma", 324.5),
    ]
    config = {"cycle_limit": 1, "cycle_period": 2, "reword_limit": 4, "window": 4, "poll_limit": 2}
    assert scripted(script, **config) == "..w...w"


def test_with_a_window_shorter_than_the_cycle_period_a_call_gone_from_the_window_still_continues_a_cycle():
    script = [
        ("web_search", "beta alpha", 242.0),
        ("web_search", "delta", 242.5),
        ("web_search", "beta alpha", 243.0),  # gone from the one-call window, two calls back
        ("web_search", "delta", 243.5),
    ]
    assert scripted(script, cycle_limit=2, cycle_period=4, reword_limit=4, window=1, poll_limit=3) == "...w"


def test_a_restored_agents_denied_call_is_still_among_its_last_calls():
    config = Config.with_preset(
        "recommended",
        duplicate_limit=100,
        max_calls_per_agent=0,
        cycle_limit=1,
        cycle_period=4,
        reword_limit=2,
        window=5,
        poll_limit=0,
    )
    before = Guard(config)
    first = [("beta alpha", 81.5), ("alpha-beta", 161.5), ("alpha beta", 162.0)]  # the third denied as a rewording
    assert "".join(outcome(before.check("a", "web_search", {"query": q}, t)) for q, t in first) == ".wR"
    state = before.export_agent("a")
    assert state is not None
    after = Guard(config)
    after.restore_agent(state)
    rest = [("bash", "gh run view 1", 242.0), ("web_search", "alpha beta", 282.5), ("bash", "gh run view 1", 403.0)]
    got = [after.check("a", tool, {"query" if tool == "web_search" else "command": x}, t) for tool, x, t in rest]
    assert "".join(map(outcome, got)) == "..w"  # as if never restored: the denied wording two calls back


def test_the_cycle_rule_turned_on_after_results_came_starts_its_lists_and_catches_a_cycle():
    # Results with progress reset the cycle rule's tallies; while the rule was off it had no lists to reset.
    g = Guard(Config(cycle_limit=0, progress=True, duplicate_limit=100))
    for i, answer in enumerate(["one", "two"]):
        g.check("a", "bash", {"command": "make"}, call_id=i)
        g.result("a", answer, call_id=i)
    g.config = g.config.replace(cycle_limit=2)
    fresh = run(Guard(Config(cycle_limit=2, duplicate_limit=100)), "m" + "abababab")[1:]
    assert run(g, "abababab") == fresh == "....CCCC"


@pytest.mark.parametrize(
    ("window", "then"),
    [(8, 1), (1, 4)],
    ids=["made-shorter-than-the-period", "made-longer-after-a-short-one-dropped-it"],
)
def test_a_window_changed_mid_run_still_finds_the_call_gone_from_it_among_the_last_calls(window: int, then: int):
    # Shorter than cyclePeriod, a window can drop a call still among the last four tried; longer again, the call
    # it dropped is still there, until four more calls are tried.
    config = Config.with_preset(
        "recommended", duplicate_limit=100, max_calls_per_agent=0, cycle_limit=2, cycle_period=4, window=window
    )
    g = Guard(config)
    calls = [("beta alpha", 242.0), ("delta", 242.5), ("beta alpha", 243.0), ("delta", 243.5)]
    got = [outcome(g.check("a", "web_search", {"query": q}, t)) for q, t in calls[:2]]
    g.config = config.replace(window=then)
    got += [outcome(g.check("a", "web_search", {"query": q}, t)) for q, t in calls[2:]]
    assert "".join(got) == "...w"  # as with a window of one from the start
