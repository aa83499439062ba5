"""Detection v3 (issue 23) under `preset: recommended`: a poll that waits is not a loop, and the same call in
other words (`reworded`) is one, without any result reported."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breaker import Config
from breaker.engine import Guard, Verdict
from breaker.keys import result_digest
from breaker.normalise import reworded_key, shell_words, sleeps, words, writes_command

REC = Config.with_preset("recommended")


def outcome(v: Verdict) -> str:
    """'.' allowed, 'w' allowed with a warning, or the deny's kind's first letter in capitals."""
    if v.allowed:
        return "w" if v.warning else "."
    return (v.kind or "?")[0].upper()


def run(guard: Guard, calls: list[tuple[str, Any]], times: list[float] | None = None, agent: str = "a") -> str:
    """Each call checked in turn (at `times[i]` when given); no result reported."""
    out = []
    for i, (tool, args) in enumerate(calls):
        out.append(outcome(guard.check(agent, tool, args, None if times is None else times[i])))
    return "".join(out)


def bash(*commands: str) -> list[tuple[str, Any]]:
    return [("bash", {"command": c}) for c in commands]


# -- polls ---------------------------------------------------------------------------------------

POLL = "gh run view 123456 --json status,conclusion"


def test_a_ci_poll_every_30_seconds_whose_first_answers_are_equal_is_not_stopped_at_its_third_poll():
    g = Guard(REC)
    answers = ["queued", "queued", "queued", "in_progress", "in_progress", "completed"]
    for i, answer in enumerate(answers):
        v = g.check("a", "bash", {"command": POLL}, 1000.0 + 30 * i, call_id=i)
        assert v.allowed and not v.warning, (i, v)
        g.result("a", result_digest(answer), call_id=i)


def test_the_same_call_back_to_back_is_still_stopped_at_the_third():
    assert run(Guard(REC), bash(POLL, POLL, POLL), [1000.0, 1004.0, 1009.0]) == ".wR"
    assert run(Guard(REC), bash(POLL, POLL, POLL)) == ".wR"  # no times known: back to back


def test_a_gap_under_poll_gap_is_back_to_back_and_the_slowest_corpus_loop_is_under_it():
    # autogpt-issue1994: the same search 25 s apart, a loop; pollGap 30 s stays above it
    assert run(Guard(REC), [("google", {"input": "x"})] * 3, [0.0, 25.0, 50.1]) == ".wR"
    assert run(Guard(REC), bash(POLL, POLL, POLL), [0.0, 30.0, 60.0]) == "..."


@pytest.mark.parametrize(
    "command",
    [
        "sleep 30 && gh run view 1 --json status",
        "sleep 5; kubectl get pods -n web",
        "sleep 1m && curl -s https://example.com/health",
        "kubectl rollout status deploy/web --timeout=60s",
        "kubectl -n web wait --for=condition=ready pod/api-0",
        "python -c 'import time; time.sleep(20); print(1)'",
    ],
)
def test_a_command_that_sleeps_or_waits_is_a_poll_without_any_times(command):
    assert sleeps("bash", {"command": command})
    assert run(Guard(REC), bash(command, command, command, command)) == "...."


def test_a_short_sleep_is_a_pause_in_a_loop_not_a_wait():
    command = "sleep 1 && cat out.log"
    assert not sleeps("bash", {"command": command})
    assert run(Guard(REC), bash(command, command, command)) == ".wR"


def test_a_wait_tool_is_a_poll():
    assert run(Guard(REC), [("wait_for_deployment", {"name": "web"})] * 4) == "...."


def test_polls_with_no_new_result_are_stopped_past_poll_limit_and_warned_first():
    g = Guard(REC.updated({"pollLimit": 4}))
    out = run(g, bash(*[f"sleep 30 && {POLL}"] * 7))
    # the first call is not a poll (nothing to repeat yet); polls 1-4 allowed, the 4th warned, the 5th denied
    assert out == "....wRR"
    v = g.check("a", "bash", {"command": f"sleep 30 && {POLL}"})
    assert (v.kind, v.count, v.limit) == ("repeat", 4, 4)


def test_a_new_result_gives_the_polls_their_limit_again():
    g = Guard(REC.updated({"pollLimit": 2}))
    command = f"sleep 30 && {POLL}"
    seen = []
    for i, answer in enumerate(["a", "a", "b", "b", "c", "c"]):
        v = g.check("a", "bash", {"command": command}, call_id=i)
        seen.append(outcome(v))
        if v.allowed:
            g.result("a", result_digest(answer), call_id=i)
    assert "".join(seen) == "..w.w."  # the 2nd poll with no new answer is warned; its new answer starts over


def test_polls_never_add_up_to_a_duplicate():
    g = Guard(REC)
    assert run(g, bash(*[f"sleep 30 && {POLL}"] * 12)) == "." * 12  # no results reported at all
    other = bash("ls", "git diff", "pytest -q")
    assert run(g, [*other, *bash(f"sleep 30 && {POLL}")]) == "...."  # after the polls, once more: not a duplicate


def test_the_seed_preset_knows_no_polls():
    out = run(Guard(Config()), bash(*[f"sleep 30 && {POLL}"] * 8), [30.0 * i for i in range(8)])
    assert out == "......DD"


# -- reworded ------------------------------------------------------------------------------------


def test_a_web_search_in_eight_wordings_is_stopped_at_the_fourth_and_warned_at_the_third():
    queries = [
        "qwen3.8 release notes",
        "release notes qwen3.8",
        "Qwen 3.8 release-notes",
        "QWEN3.8  Release Notes",
        "notes release Qwen 3.8",
        "qwen-3.8 release notes",
        "Release notes: Qwen3.8",
        "qwen3.8 release  notes",
    ]
    assert len({words(q) for q in queries}) == 1
    g = Guard(REC)
    assert run(g, [("web_search", {"query": q}) for q in queries]) == "..wRRRRR"
    v = g.check("a", "web_search", {"query": "release notes QWEN 3.8"})
    assert (v.kind, v.count, v.limit, v.rule) == ("reworded", 8, 3, "reworded")  # the wordings tried before it


def test_a_pattern_search_with_its_words_shuffled_is_stopped():
    patterns = ["retry|backoff|timeout|jitter", "timeout|retry|jitter|backoff", "jitter|backoff|retry|timeout"]
    calls = [("Grep", {"pattern": p, "path": "src"}) for p in [*patterns, patterns[0]]]
    assert run(Guard(REC), calls) == "..wR"


def test_one_grep_in_six_spellings_is_stopped():
    spellings = [
        'grep -rn "handleAuth" src/',
        "grep -rni handleAuth ./src/",
        "grep -Rn 'handleAuth' src",
        'grep -r -n "handleAuth" ./src',
        "grep -rn handleAuth src/",
        'grep -Rni "handleAuth" ./src/',
    ]
    assert len({shell_words(s) for s in spellings}) == 1
    assert run(Guard(REC), bash(*spellings)) == "..wRRR"


def test_ls_then_ls_la_on_one_directory_again_and_again_is_stopped():
    assert run(Guard(REC), bash("ls src", "ls -la src/", "ls ./src", "ls -la ./src/", "ls src")) == "..wRR"


def test_a_codex_argv_command_is_read_as_its_shell_text():
    a = reworded_key("shell", {"command": ["bash", "-lc", "cd /w && git status -sb"]})
    assert a == reworded_key("shell", {"command": ["bash", "-lc", "cd /w&& git status"]})


def test_without_results_the_reworded_rule_needs_no_result_and_with_new_results_it_starts_over():
    g = Guard(REC)
    commands = ["ls src", "ls -la src", "ls src/", "ls -l src"]
    seen = []
    for i, c in enumerate(commands):
        v = g.check("a", "bash", {"command": c}, call_id=i)
        seen.append(outcome(v))
        g.result("a", result_digest(f"listing {i}"), call_id=i)  # each answer new: files appear between them
        g.result("a", result_digest(f"listing {i}"), call_id=i)
    assert "".join(seen) == "..w" + "R"  # a reworded call's own first result is not progress
    # a result that changes for the same wording is progress: the wordings before it count no more
    g = Guard(REC)
    seen = []
    for i, c in enumerate(["ls src", "ls -la src", "ls src", "ls -la src", "ls src", "ls -la src"]):
        v = g.check("a", "bash", {"command": c}, call_id=i)
        seen.append(outcome(v))
        g.result("a", result_digest(f"listing {i}"), call_id=i)
    assert "".join(seen) == "..w..."


# -- what a healthy run makes distinct stays distinct ---------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read_file", [{"path": "src/app.py", "offset": n, "limit": 200} for n in (0, 200, 400, 600, 800)]),
        ("bash", [{"command": f"sed -n {n},{n + 99}p src/app.py"} for n in (1, 101, 201, 301, 401)]),
        ("bash", [{"command": f"head -{n} big.log | tail -100"} for n in (100, 200, 300, 400, 500)]),
        ("bash", [{"command": f"git log --oneline --skip={n} -n 50"} for n in (0, 50, 100, 150, 200)]),
        (
            "web_search",
            [
                {"query": q}
                for q in (
                    "qwen3 release notes",
                    "qwen3 release notes tool calling",
                    "qwen3 tool calling loop bug",
                    "qwen3 tool calling loop bug vllm",
                    "vllm qwen3 parser repeated tool calls",
                )
            ],
        ),
    ],
    ids=["paging-by-offset", "sed-ranges", "head-counts", "git-log-skip", "narrowing-research"],
)
def test_calls_a_healthy_run_makes_distinct_are_not_merged(tool, args):
    assert len({reworded_key(tool, a) for a in args}) == len(args)
    assert run(Guard(REC), [(tool, a) for a in args]) == "." * len(args)


def test_ls_between_writes_is_not_reworded():
    calls: list[tuple[str, Any]] = []
    for n in range(6):
        calls += [("bash", {"command": "ls -la src" if n % 2 else "ls src"}), ("write", {"path": f"src/m{n}.py"})]
    assert run(Guard(REC), calls) == "." * len(calls)


def test_the_same_wording_again_and_again_is_the_repeat_rules_and_the_seed_knows_no_rewording():
    assert run(Guard(REC), bash("ls src", "ls src", "ls src")) == ".wR"  # a repeat, not reworded
    spellings = ["grep -rn x src/", "grep -rni x ./src/", "grep -Rn 'x' src", "grep -r -n x ./src", "grep x src"]
    assert run(Guard(Config()), bash(*spellings)) == "....."


def test_a_cycle_of_a_check_and_a_sleep_is_a_poll_not_a_cycle():
    calls = [("BashOutput", {"bash_id": "b2"}), ("Bash", {"command": "sleep 30"})] * 4
    assert run(Guard(REC), calls) == "." * 8  # no times: the sleep says so
    assert run(Guard(REC), [("BashOutput", {"bash_id": "b2"}), ("Bash", {"command": "sleep 1"})] * 3) == "...wCC"


def test_poll_gap_0_leaves_only_the_calls_that_sleep_as_polls():
    g = Guard(REC.updated({"pollGap": 0}))
    assert run(g, bash(POLL, POLL, POLL), [0.0, 60.0, 120.0]) == ".wR"
    assert run(g, bash(*[f"sleep 30 && {POLL}"] * 3), [0.0, 1.0, 2.0], agent="b") == "..."


# -- stall: what a result says -------------------------------------------------------------------


def results(guard: Guard, calls: list[tuple[str, Any, str]]) -> str:
    out = []
    for i, (tool, args, answer) in enumerate(calls):
        v = guard.check("a", tool, args, call_id=i)
        out.append(outcome(v))
        if v.allowed:
            guard.result("a", result_digest(answer), call_id=i)
    return "".join(out)


def test_fifteen_writes_to_fifteen_files_answered_alike_are_not_a_stall():
    # opencode-deepseek-ci-poll-sleep100: OpenCode's write tool answers every write "Wrote file successfully."
    writes = [
        ("write", {"filePath": f"src/api/m{n}.ts", "content": f"export {n}"}, "Wrote file successfully.")
        for n in range(15)
    ]
    assert results(Guard(REC), writes) == "." * 15
    assert results(Guard(REC.updated({"tools": {"write": {"stallLimit": 3}}})), writes[:5]) == "..wSS"  # unless asked


def test_a_search_answered_alike_whatever_its_words_stalls_at_its_fourth_call():
    # claude-code-issue-grep-reworded-x5: five patterns for one function, each "Found 0 lines"
    patterns = ["filename_patterns", r"self\.filename_patterns", "_get_file_name_from_content", "start.*file"]
    calls = [("Search", {"pattern": p, "output_mode": "content"}, "Found 0 lines") for p in patterns]
    assert results(Guard(REC), calls) == "..wS"
    other = [("Read", {"file_path": f"f{n}.py"}, "(empty)") for n in range(4)]  # not a search: stallLimit 7
    assert results(Guard(REC), other) == "...."


# -- properties ----------------------------------------------------------------------------------

WORDINGS = [
    ("bash", {"command": "ls src"}),
    ("bash", {"command": "ls -la ./src/"}),
    ("bash", {"command": "grep -rn foo src"}),
    ("bash", {"command": "grep -Rni 'foo' ./src"}),
    ("bash", {"command": "sleep 30 && gh run view 1"}),
    ("web_search", {"query": "qwen3.8 release notes"}),
    ("web_search", {"query": "Release-Notes qwen 3.8"}),
    ("write", {"path": "a.py"}),
]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(WORDINGS) - 1), st.sampled_from([1.0, 5.0, 40.0]), st.booleans()), max_size=60
    )
)
def test_under_recommended_every_first_deny_follows_a_warning_with_rewordings_polls_and_results(seq):
    # with the unchanged rule's own warning on (recommended leaves it off: see the unchanged rule's tests below)
    g = Guard(REC.updated({"maxCallsPerAgent": 0, "pollLimit": 4, "unchangedWarn": 1}))
    warned, now = False, 0.0
    for i, (n, gap, same) in enumerate(seq):
        now += gap
        tool, args = WORDINGS[n]
        v = g.check("a", tool, args, now, call_id=i)
        if v.warning:
            warned = True
        if not v.allowed:
            assert warned, (seq[: i + 1], v)
            break
        g.result("a", result_digest("same" if same else f"new {i}"), call_id=i)


def test_a_check_then_a_sleep_again_and_again_never_adds_up_to_a_duplicate():
    # claude-code-subagent-slept-poll-extraction: BashOutput, `sleep 30`, BashOutput… each answer the same
    g = Guard(REC)
    seen, now = [], 0.0
    for i in range(20):
        tool, args = ("BashOutput", {"bash_id": "5d8215"}) if i % 2 == 0 else ("Bash", {"command": f"sleep {30 * i}"})
        now += 30 * i + 3 if i % 2 == 0 else 3  # the check comes once the sleep before it is over
        v = g.check("a", tool, args, now, call_id=i)
        seen.append(outcome(v))
        g.result("a", result_digest("<status>running</status>\n\n"), call_id=i)
    assert "".join(seen) == "." * 20


def test_polls_in_a_row_of_any_calls_are_bounded_by_poll_limit():
    g = Guard(REC.updated({"pollLimit": 4}))
    calls = [("BashOutput", {"bash_id": "b"}), ("Bash", {"command": "sleep 30"})] * 5
    times = [33.0 * i for i in range(10)]  # each check 33 s after the sleep before it began
    assert run(g, calls, times) == ".." + "...w" + "RRRR"  # the first of each is no repeat; polls 1-4, the 4th warned


# -- results: what the harness stamps in is not news ----------------------------------------------


def test_claude_codes_bashoutput_timestamp_is_left_out_of_a_recorded_result(tmp_path):
    from breaker.transcripts import read

    def answer(stamp: str) -> str:
        return f"<status>running</status>\n\n<timestamp>2025-12-01T04:48:{stamp}Z</timestamp>"

    lines = [
        {"agent": "a", "tool": "BashOutput", "args": {"bash_id": "b"}, "result": answer(s)} for s in ("27.9", "30.7")
    ]
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    digests = read([path]).results
    assert digests[0] == digests[1]
    assert run_results(lines) == ".wR"  # a tight poll of one unchanged answer is a repeat, stopped at its third


def run_results(lines: list[dict[str, Any]]) -> str:
    from breaker.transcripts import result_value

    g = Guard(REC)
    out = []
    for i, line in enumerate([*lines, lines[-1]]):
        v = g.check("a", line["tool"], line["args"], call_id=i)
        out.append(outcome(v))
        if v.allowed:
            g.result("a", result_digest(result_value(line["result"], "calls")), call_id=i)
    return "".join(out)


def test_cbhook_leaves_claude_codes_bashoutput_timestamp_out_of_the_digest():
    from breaker.hookwire import detect, parse_event

    def post(stamp: str) -> dict[str, Any]:
        return {
            "hook_event_name": "PostToolUse",
            "session_id": "s",
            "tool_name": "BashOutput",
            "tool_input": {"bash_id": "b"},
            "tool_response": f"<status>running</status>\n\n<timestamp>2025-12-01T04:48:{stamp}Z</timestamp>",
        }

    def digest(payload: dict[str, Any]) -> str:
        return parse_event(detect(payload) or "", payload)[1].digest

    assert digest(post("27.9")) == digest(post("30.7"))
    as_dict = {**post("1"), "tool_response": {"status": "running", "timestamp": "2025-12-01T04:48:27Z"}}
    assert digest(as_dict) == digest({**as_dict, "tool_response": {"status": "running", "timestamp": "x"}})


# -- unchanged: the same call a third time after two identical answers, nothing written between -----------------


def answered(guard: Guard, calls: list[tuple[str, Any, str]], agent: str = "a") -> str:
    """Each call checked, and its answer (the third item) reported when it was allowed."""
    out = []
    for i, (tool, args, answer) in enumerate(calls):
        v = guard.check(agent, tool, args, call_id=i)
        out.append(outcome(v))
        if v.allowed:
            guard.result(agent, result_digest(answer), call_id=i)
    return "".join(out)


BOOK = ("book_reservation", {"user_id": "ivan", "flights": ["HAT1"], "payment": 299}, "Error: paid 299, total 375")


def think(n: int) -> tuple[str, Any, str]:
    return ("think", {"thought": f"thought {n}"}, "")


def look(n: int) -> tuple[str, Any, str]:
    """A read of something new each time."""
    return ("search_direct_flight", {"origin": "JFK", "date": f"2024-05-{n:02}"}, f"flights on {n}")


def test_a_booking_retried_a_third_time_after_two_identical_errors_with_only_reads_between_is_denied():
    # taubench-gpt4o-booking-retry-recovers: book, think, book, think, calculate, book — each booking the same error
    calc = ("calculate", {"expression": "158 + 141"}, "299.0")
    g = Guard(REC)
    assert answered(g, [BOOK, think(1), BOOK, think(2), calc, BOOK]) == "...w.D"  # (w: cycle's, A-B-A-B)
    v = g.check("a", *BOOK[:2])
    assert (v.kind, v.count, v.limit) == ("duplicate", 2, 2)
    assert (
        "identical calls answered alike with nothing written between" not in v.reason
    )  # the deny text is the config's


def test_a_file_read_a_third_time_with_only_reads_between_is_denied_and_unchanged_limit_3_gives_one_read_more():
    # docs/guard.md's known limit: the file did not change, so a third read can only get what the first two got —
    # also for a reader whose context was compacted; `unchangedLimit: 3` is the setting that lets it read once more
    read = ("Read", {"file_path": "/src/a.py"}, "def a(): ...")
    calls = []
    for n in range(4):
        calls += [read, ("Grep", {"pattern": f"name{n}"}, f"{n} matches")]
    assert answered(Guard(REC), calls) == "....D.D."
    assert answered(Guard(REC.updated({"unchangedLimit": 3})), calls) == "......D."


def test_quiet_shell_commands_that_write_are_no_stall_and_a_read_after_them_starts_the_run_again():
    # claude-code-export-tool-write-retries-and-reruns, calls 49-56 (out of sample, 2026-12-03): eight different
    # commands that write, each answered with empty output, are healthy work; stall denied the eighth
    commands = ["mkdir -p out", "mv a out/", "mv b out/", "mv c out/", "mv d out/", "rm -f tmp.txt"]
    commands += ["echo one > out/x.txt", "echo two > out/y.txt", "mv e out/", "mv f out/"]
    assert answered(Guard(REC), [("Bash", {"command": c}, "") for c in commands]) == "." * 10
    # reads answered alike still stall (stallLimit 7): the eighth is denied, the seventh warned
    reads = [("Bash", {"command": f"ls dir{n}"}, "") for n in range(9)]
    assert answered(Guard(REC), reads) == "......wSS"
    # and a command that writes between them starts the run again once its result is in (it is itself warned: it
    # comes after six alike, and the check cannot know its answer yet)
    mixed = [*reads[:6], ("Bash", {"command": "touch x"}, ""), *reads[6:]]
    assert answered(Guard(REC), mixed) == "......w..."


def test_a_loop_that_writes_each_time_is_no_stall_but_its_identical_calls_are_still_repeats():
    # SECURITY.md: the agent's command text says whether a call may write; writing calls leave stall's count
    varied = [("Bash", {"command": f"grep -rn foo{n} src > /tmp/out"}, "") for n in range(10)]
    assert answered(Guard(REC), varied) == "." * 10  # varied and writing: not a stall
    same = [("Bash", {"command": "grep -rn foo src > /tmp/out"}, "")] * 4
    assert answered(Guard(REC), same) == ".wRR"  # identical: repeat denies at the third
    counted = REC.updated({"tools": {"Bash": {"stallLimit": 3}}})
    assert answered(Guard(counted), varied[:5]) == "..wSS"  # a tool's own stallLimit counts its writes


def test_the_warning_names_what_the_unchanged_rule_counts():
    g = Guard(REC.updated({"unchangedWarn": 1}))
    assert answered(g, [BOOK, look(1), BOOK, look(2), BOOK]) == "..w.D"
    g = Guard(REC.updated({"unchangedWarn": 1}))
    answered(g, [BOOK, look(1)])
    v = g.check("a", *BOOK[:2])
    assert (v.rule, v.count, v.limit) == ("duplicate", 2, 2)
    assert "identical calls answered alike with nothing written between" in v.warning


def test_a_test_rerun_after_each_edit_with_the_same_output_runs_on():
    # swe-agent-kimi-mypy-same-result-new-edits: run, edit, run, edit, run… the output does not change yet
    run_ = ("bash", {"command": "cd /testbed && python3 -m mypy repro/main.py"}, "error: Name 'x' is not defined")
    calls = []
    for n in range(5):
        calls += [run_, ("str_replace_editor", {"command": "str_replace", "path": "a.py", "new_str": str(n)}, "ok")]
    assert answered(Guard(REC), calls) == "." * 10


def test_a_command_that_writes_between_lets_the_call_run_again_and_one_that_only_reads_does_not():
    # codex-issue6970-done-true-cycle: `true` between ever-new echoes, answered "(no output)" each time
    true = ("shell", {"command": ["bash", "-lc", "true"]}, "(no output)")
    echo = [("shell", {"command": ["bash", "-lc", f"echo 'done {n}'"]}, f"done {n}") for n in range(3)]
    assert answered(Guard(REC), [true, echo[0], true, echo[1], true]) == "....D"
    sed = [("shell", {"command": f"sed -i 's/a/{n}/' f.py"}, "") for n in range(3)]
    assert answered(Guard(REC), [true, sed[0], true, sed[1], true]) == "....."


def test_a_call_that_may_write_is_not_counted_by_it():
    # claude-code-pytest-same-error-then-fix: the same failing pytest three times while the agent only looks around
    pytest_ = ("Bash", {"command": "uv run pytest tests/ -v 2>&1 | tail -40"}, "1 failed")
    looks = [("Bash", {"command": f"ls -la dir{n}"}, f"listing {n}") for n in range(2)]
    assert answered(Guard(REC), [pytest_, looks[0], pytest_, looks[1], pytest_]) == "....."


def test_a_new_answer_starts_the_count_again():
    lookup = ("get_reservation_details", {"reservation_id": "K1"}, "")
    calls = [(*lookup[:2], "status: pending"), look(1), (*lookup[:2], "status: booked"), look(2)]
    assert answered(Guard(REC), [*calls, (*lookup[:2], "status: booked"), look(3), lookup]) == "......D"
    assert answered(Guard(REC), [*calls, (*lookup[:2], "status: paid"), look(3), lookup]) == "......."


def test_a_poll_is_not_counted_by_it():
    poll = ("bash", {"command": "sleep 30 && gh run view 1"}, "in_progress")
    assert answered(Guard(REC), [poll, think(1)] * 5) == "." * 10


def test_think_with_its_thought_ignored_is_not_one_call_answered_alike():
    # taubench: `think` answers "" whatever it is told; with `thought` in ignoreArgs every think keys alike
    calls = [think(0)]
    for n in range(1, 4):
        calls += [look(n), think(n)]
    assert answered(Guard(REC), calls) == "......."


def test_without_results_it_never_denies_and_the_seed_has_no_such_rule():
    g = Guard(REC)
    assert run(g, [BOOK[:2], look(1)[:2], BOOK[:2], look(2)[:2], BOOK[:2]]) == "....."
    seed = Guard(Config())
    assert answered(seed, [BOOK, think(1), BOOK, think(2), BOOK]) == "....."
    assert Config().unchanged_limit == 0 and REC.unchanged_limit == 2


def test_a_restart_keeps_what_the_unchanged_rule_counted(tmp_path):
    from breaker.store import StateStore, load

    g = Guard(REC)
    assert answered(g, [BOOK, look(1), BOOK, look(2)]) == "...."
    state = g.export_agent("a")
    assert state is not None and state.alike
    store = StateStore(tmp_path / "s.cbstate", seed=1)
    store.open()
    done: list[bool] = []
    store.save([("a", state, "", None)], lambda: done.append(True))
    store.close()
    ((record,),) = [load(tmp_path / "s.cbstate")[0].agents]
    assert (record.state.wrote, record.state.alike) == (state.wrote, state.alike)
    again = Guard(REC)
    again.restore_agent(record.state)
    assert outcome(again.check("a", *BOOK[:2])) == "D"
    wrote = Guard(REC)
    wrote.restore_agent(record.state)
    assert answered(wrote, [("Edit", {"file_path": "a.py"}, "ok"), BOOK]) == ".."


@pytest.mark.parametrize(
    "command",
    [
        "true",
        "echo 'All set.'",
        "git status -sb",
        "cd /x && git diff HEAD~1 | head -50",
        'grep -rn "a>b" src 2>/dev/null',
        "ls -la ./src/ 2>&1 | tail",
        "sed -n 1,100p f.py",
        "find . -name '*.py'",
        "FOO=1 cat a.txt",
    ],
)
def test_a_command_of_programs_that_only_read_writes_nothing(command):
    assert not writes_command(command)


@pytest.mark.parametrize(
    "command",
    [
        "python reproduce.py",
        "uv run pytest tests/",
        "cat a > b",
        "echo x >> log",
        "sed -i 's/a/b/' f",
        "find . -name x -delete",
        "git commit -am x",
        "ls; rm -rf build",
        "echo $(touch x)",
        "sleep 30 && gh run view 1",
    ],
)
def test_a_command_that_may_write_is_one(command):
    assert writes_command(command)


def test_a_call_gone_from_the_window_takes_its_answers_with_it_and_its_slot_starts_clean():
    g = Guard(REC.updated({"window": 4}))
    other = ("get_flight_status", {"flight": "HAT9"}, "on time")
    # BOOK twice answered alike, then pushed out of the window by four new reads
    assert answered(g, [BOOK, look(1), BOOK, *(look(n) for n in range(2, 6))]) == "......."
    # a new call takes a freed slot, its answer not reported: its second call is not judged by what the slot held
    assert outcome(g.check("a", *other[:2])) == "."
    assert answered(g, [look(6), other]) == ".."
    assert answered(g, [BOOK, look(7), BOOK]) == "..."  # BOOK is new to the window again
