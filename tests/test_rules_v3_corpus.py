"""Issue 23's targets on the public corpus (tests/fixtures/corpus) under `preset: recommended`, as `cbreplay
--compare` counts them: the ones met are held here; docs/corpus.md says which are not, and by how much."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from breaker.compare import compare, load_candidates
from breaker.transcripts import read_corpus

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"


@cache
def outcomes(setting: str) -> dict[str, Any]:
    """Per trace, its label and how `setting` went on it; and the groups' sums."""
    (candidate,) = load_candidates([setting])
    result = compare(read_corpus([str(CORPUS)]), [candidate])
    traces = {o.trace.name: o for o in result.outcomes["A"]}
    return {"traces": traces, "loop": result.group("A", "loop"), "healthy": result.group("A", "healthy")}


REC = "preset=recommended"


def test_recommended_stops_no_healthy_run_and_warns_at_most_one_in_seven():
    healthy = outcomes(REC)["healthy"]
    assert healthy.traces >= 30
    assert healthy.stopped == 0
    assert healthy.warned * 7 <= healthy.traces, f"{healthy.warned} of {healthy.traces} healthy runs warned"


def test_recommended_stops_every_loop_and_warns_nine_in_ten_before_their_first_deny():
    loops = outcomes(REC)["loop"]
    assert loops.traces >= 18
    assert loops.stopped * 100 >= loops.traces * 95
    assert loops.warned_first * 10 >= loops.stopped * 9


def test_the_median_first_deny_is_at_call_6_with_the_loops_the_manifest_stops_late_stopped_at_their_expected_calls():
    # Target <= 6 (issue 23). On the 18 loops the rules were tuned on it was 6.5: the four loops stopped last are
    # stopped at the very calls MANIFEST.json's expected_stop_by names (6, 7, 9, 11). The out-of-sample set of
    # 2026-12-03 adds three loops stopped at calls 3, 3 and 5, which brings the median of the 21 first denies to 6.
    traces = outcomes(REC)["traces"]
    for name, call in (
        ("syzkaller-aflow-grepper-three-expression-cycle.jsonl", 6),
        ("codex-issue6970-done-true-cycle.jsonl", 7),
        ("taubench-gpt4o-booking-retry-recovers.jsonl", 9),
        ("taubench-gpt4o-update-retry-ignoring-user.jsonl", 11),
    ):
        o = traces[name]
        assert o.first_stop == call == o.trace.expected_stop, name
    loops = outcomes(REC)["loop"]
    assert loops.median_first_stop is not None and loops.median_first_stop <= 6


def test_the_tight_bashoutput_polls_are_stopped_once_the_timestamp_is_left_out():
    traces = outcomes(REC)["traces"]
    for name, call in (
        ("claude-code-subagent-bashoutput-poll-x193.jsonl", 4),
        ("claude-code-subagent-tight-poll-then-kill.jsonl", 6),
    ):
        o = traces[name]
        assert (o.first_stop, o.kind, o.warned_first) == (call, "repeat", True), name


def test_the_ci_and_job_waits_run_to_their_end_unwarned():
    traces = outcomes(REC)["traces"]
    for name in (
        "opencode-deepseek-ci-poll-sleep100.jsonl",
        "opencode-deepseek-ci-poll-deploy.jsonl",
        "claude-code-subagent-slept-poll-extraction.jsonl",
        "claude-code-server-restart-health-waits.jsonl",
    ):
        o = traces[name]
        assert (o.first_stop, o.first_warning) == (None, None), name


def test_the_reworded_rule_stops_the_respelled_git_status_poll_and_without_it_only_unchanged_does_a_call_later():
    with_it = outcomes(REC)["traces"]["codex-issue7049-git-status-poll.jsonl"]
    assert (with_it.first_stop, with_it.kind, with_it.warned_first) == (6, "reworded", True)
    without = outcomes(REC + ",rewordLimit=0")["traces"]["codex-issue7049-git-status-poll.jsonl"]
    assert (without.first_stop, without.kind) == (7, "duplicate")  # the third `git status -sb`, answered alike
    neither = outcomes(REC + ",rewordLimit=0,unchangedLimit=0")["traces"]["codex-issue7049-git-status-poll.jsonl"]
    assert neither.first_stop is None


def test_the_healthy_traces_that_hold_the_key_to_what_a_healthy_run_keeps_apart_are_not_warned():
    traces = outcomes(REC)["traces"]
    for name, o in traces.items():
        if o.trace.label == "healthy" and name.startswith("claude-code-subagent-"):
            assert (o.first_stop, o.first_warning) == (None, None), name


def test_a_search_answered_alike_four_times_is_stopped_at_its_fourth_call():
    o = outcomes(REC)["traces"]["claude-code-issue-grep-reworded-x5.jsonl"]
    assert (o.first_stop, o.kind, o.warned_first) == (4, "stall", True)
