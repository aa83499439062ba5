"""cbreplay beyond the seed: recorded results fed to the guard (progress), warnings in --verdicts, presets
through --set, and --compare over a labelled corpus (tests/fixtures/replay_compare, see its MANIFEST.json)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

import orjson
import pytest

from breaker import Config, Guard
from breaker.compare import split_setting
from breaker.config import BY_KEY, PRESETS
from breaker.keys import result_digest
from breaker.replay import load_config, replay
from breaker.replaycli import main
from breaker.transcripts import read, read_corpus
from tests.test_replay import SESSION, calls_file, claude_lines, dsh_lines, write_claude

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRANSCRIPTS = FIXTURES / "transcripts"
CORPUS = FIXTURES / "replay_compare"
RECOMMENDED = PRESETS["recommended"]

# The tests of a mechanism name every key they rely on, so that retuning a preset leaves them be.
# Results: three identical calls in a row allowed (the fourth denied), and progress from the results.
PROGRESS = ["--set", "repeatLimit=3", "--set", "progress=true"]
# --compare: the seed; then repeats stopped at the fourth (warned at the third), A-B-A-B cycles at
# their sixth call, completing the third round (warned at the fourth and fifth), duplicates warned on the
# last two duplicateLimit allows, progress; then the same with a fourth repeat allowed.
_RULES = "repeatWarn=1,cycleLimit=3,cycleWarn=2,duplicateWarn=2,progress=true"
SETTINGS = ["preset=seed", f"repeatLimit=3,{_RULES}", f"repeatLimit=4,{_RULES}"]


def run(argv: list[Any], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def verdict_lines(argv: list[Any], capsys) -> list[dict[str, Any]]:
    code, out, err = run([*argv, "--verdicts"], capsys)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def denied(lines: list[dict[str, Any]]) -> list[int]:
    return [v["index"] for v in lines if v["decision"] == "deny"]


def poll(results: list[Any]) -> list[dict[str, Any]]:
    """An agent polling one job: the same call each time, with the recorded results given."""
    return [{"agent": "a", "tool": "bash", "args": {"command": "job status 42"}, "result": r} for r in results]


# -- results --------------------------------------------------------------------------------------


def test_a_poll_whose_result_changes_is_progress_and_not_denied(tmp_path, capsys):
    path = calls_file(tmp_path / "c.jsonl", poll([f"running {p}%" for p in range(0, 100, 10)]))
    lines = verdict_lines([path, *PROGRESS, "--set", "repeatWarn=1", "--set", "duplicateWarn=2"], capsys)
    assert [v["decision"] for v in lines] == ["allow"] * 10
    # Each changed result restarts the counts: never more than 1 call in a row or 1 duplicate before a
    # call, so never near a limit (without progress the third call is warned and the fourth denied).
    assert not any("warn" in v for v in lines)


def test_the_same_poll_with_a_constant_result_is_denied(tmp_path, capsys):
    path = calls_file(tmp_path / "c.jsonl", poll(["running"] * 10))
    assert denied(verdict_lines([path, *PROGRESS], capsys)) == [4, 5, 6, 7, 8, 9, 10]  # 3 in a row allowed


def test_without_progress_the_results_change_nothing(tmp_path, capsys):
    progressing = calls_file(tmp_path / "p.jsonl", poll([f"running {p}%" for p in range(10)]))
    expected = [4, 5, 6, 7, 8, 9, 10]  # repeatLimit 3, as if every result were the same
    assert denied(verdict_lines([progressing, *PROGRESS, "--set", "progress=false"], capsys)) == expected
    assert denied(verdict_lines([progressing], capsys)) == [7, 8, 9, 10]  # the seed: duplicateLimit 6


def test_a_result_of_any_json_value_is_digested_and_null_means_none_recorded(tmp_path):
    rows = [{"agent": "a", "tool": "t", "args": {}, "result": r} for r in ({"b": 1, "a": [2]}, "text", None, 3)]
    reading = read([calls_file(tmp_path / "c.jsonl", rows)])
    assert reading.results == {0: result_digest({"a": [2], "b": 1}), 1: result_digest("text"), 3: result_digest(3)}
    assert reading.agents["a"].results == 3


def test_a_denied_calls_recorded_result_is_not_reported(tmp_path, monkeypatch):
    reported: list[tuple[str, str, Any]] = []

    class Spy(Guard):
        def result(self, agent: str, digest: str, **kw: Any) -> tuple[bool, str]:
            reported.append((agent, digest, kw.get("call_id")))
            return super().result(agent, digest, **kw)

    monkeypatch.setattr("breaker.replay.Guard", Spy)
    reading = read([calls_file(tmp_path / "c.jsonl", poll([f"r{i}" if i >= 5 else "same" for i in range(8)]))])
    result = replay(reading, Config(repeat_limit=3, progress=True), verdicts=True)
    allowed = [i for i, v in enumerate(result.verdicts or []) if v.allowed]
    # Calls 4-8 denied: 3 in a row allowed. Had call 6's new result gone in, call 7 would have been progress.
    assert allowed == [0, 1, 2]
    assert [call_id for _, _, call_id in reported] == allowed
    assert [d for _, d, _ in reported] == [result_digest("same")] * 3  # the later, different results never went in


def claude_progress_lines(results: list[str]) -> list[bytes]:
    """A Claude Code session polling one command, its tool_result blocks carrying `results`."""
    lines = claude_lines(SESSION, [("Bash", {"command": "job status 42"})] * len(results))
    out, k = [], 0
    for raw in lines:
        obj = orjson.loads(raw)
        content = obj.get("message", {}).get("content")
        if isinstance(content, list) and content and content[0].get("type") == "tool_result":
            content[0]["content"] = [{"type": "text", "text": results[k]}]
            k += 1
        out.append(orjson.dumps(obj))
    return out


@pytest.mark.parametrize(("results", "expected"), [([f"{p}%" for p in range(8)], []), (["50%"] * 8, [4, 5, 6, 7, 8])])
def test_claude_code_tool_results_are_paired_with_their_calls_and_fed(tmp_path, capsys, results, expected):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(claude_progress_lines(results)))
    assert len(read([path]).results) == 8
    assert denied(verdict_lines([path, *PROGRESS], capsys)) == expected


def test_dsh_tool_results_are_paired_by_call_id_and_fed(tmp_path, capsys):
    lines = dsh_lines("session-1", [("bash", {"command": "job status 42"})] * 8)
    changed = []
    for raw in lines:  # every result text different: "ok 0", "ok 1", …
        obj = orjson.loads(raw)
        if obj.get("type") == "tool/result":
            block = obj["data"]["message"]["content"][0]
            block["content"][0]["text"] = f"ok {obj['data']['step']}"
        changed.append(orjson.dumps(obj))
    for name, data in (("constant", lines), ("changing", changed)):
        path = tmp_path / name / "session.jsonl"
        path.parent.mkdir()
        path.write_bytes(b"\n".join(data))
    assert denied(verdict_lines([tmp_path / "constant", *PROGRESS], capsys)) == [4, 5, 6, 7, 8]
    assert denied(verdict_lines([tmp_path / "changing", *PROGRESS], capsys)) == []


def test_results_written_out_of_order_find_their_own_calls(tmp_path):
    # One assistant message with two tool_use blocks; the results come back in the other order.
    common = {"sessionId": SESSION, "timestamp": "2026-11-30T01:00:00.000Z"}
    uses = [{"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": n}} for n in "ab"]
    results = [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"file {n}"} for n in "ba"]
    rows = [
        {**common, "type": "assistant", "uuid": "1", "message": {"role": "assistant", "content": uses}},
        {**common, "type": "user", "uuid": "2", "message": {"role": "user", "content": results}},
    ]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(map(orjson.dumps, rows)))
    reading = read([path])
    assert [c.args for c in reading.calls] == [{"file_path": "a"}, {"file_path": "b"}]
    assert reading.results == {0: result_digest("file a"), 1: result_digest("file b")}


# -- results in the real recordings ---------------------------------------------------------------


def results_by_agent(path: Path) -> dict[str, list[str | None]]:
    reading = read([path])
    out: dict[str, list[str | None]] = {}
    for i, call in enumerate(reading.calls):
        out.setdefault(call.agent, []).append(reading.results.get(i))
    return out


def test_real_codex_outputs_are_results_without_their_run_specific_lines_and_blocked_ones_are_none():
    (rollout,) = (TRANSCRIPTS / "codex" / "sessions").glob("*/*/*/rollout-*.jsonl")
    (results,) = results_by_agent(rollout).values()
    # Each output has its own "Chunk ID" and "Wall time": the same `echo` gives the same digest without them.
    assert results[:6] == [results[0]] * 6 and results[0] is not None
    assert results[6:] == [None, None]  # "Command blocked by PreToolUse hook": no tool ran


def test_real_gemini_results_leave_out_the_process_group_and_the_blocked_calls():
    (chat,) = (TRANSCRIPTS / "gemini" / "tmp").glob("*/chats/session-*.jsonl")
    (results,) = results_by_agent(chat).values()
    assert results[0] is not None and results == [results[0], results[0], None, None]


def test_real_claude_subagent_results_are_read_and_hook_denials_are_not_results():
    (main_file,) = sorted((TRANSCRIPTS / "claude" / "projects").glob("*/*.jsonl"))
    by_agent = results_by_agent(main_file)
    sub = next(v for a, v in by_agent.items() if "/" in a)
    assert sub[:6] == [sub[0]] * 6 and sub[0] == result_digest("cbprobe4")
    assert sub[6:] == [None] * 4  # the lines carry toolDenialKind
    root = by_agent[main_file.stem]
    assert None not in root and root[1:] == [result_digest("cbprobe4")] * 3


def test_real_dsh_results_are_read_for_every_call():
    child = next(v for a, v in results_by_agent(TRANSCRIPTS / "dsh-zstd").items() if not a.startswith("session-"))
    assert child[:6] == [result_digest("cbprobe4\n")] * 6
    # The stand-in's deny text is not this guard's: dsh records it as an error result like any other.
    assert child[6:] == [child[6]] * 4 and child[6] != child[0]


def test_real_recordings_under_the_recommended_preset_are_stopped_by_the_repeat_rule_past_its_limit(capsys):
    limit = RECOMMENDED["repeatLimit"]
    assert isinstance(limit, int) and 0 < limit < Config.with_preset("recommended").duplicate_limit
    # Every agent runs `echo cbprobe4` back to back to its last call: a parent (dsh twice, Claude Code)
    # 3 times after spawning its subagent, the subagents (10 times), Codex (8) and Gemini CLI (4) from
    # their first call. Its first `limit` calls in a row are allowed, every later one denied.
    calls: dict[str, list[Any]] = {}
    for call in read([TRANSCRIPTS]).calls:
        calls.setdefault(call.agent, []).append(call)
    expected = {}
    for agent, mine in calls.items():
        start = 2 if mine[0].tool in ("Agent", "subagent") else 1
        assert all("echo cbprobe4" in json.dumps(c.args) for c in mine[start - 1 :]), agent
        expected[agent] = list(range(start + limit, len(mine) + 1))
    assert sorted(map(len, calls.values())) == [4, 4, 4, 4, 8, 10, 10, 10]
    got: dict[str, list[int]] = {}
    for v in verdict_lines([TRANSCRIPTS, "--set", "preset=recommended"], capsys):
        got.setdefault(v["agent"], [])
        if v["decision"] == "deny":
            assert v["kind"] == "repeat", v
            got[v["agent"]].append(v["index"])
    assert got == expected


def test_the_results_of_calls_blocked_in_the_recording_are_not_fed_as_progress():
    (chat,) = (TRANSCRIPTS / "gemini" / "tmp").glob("*/chats/session-*.jsonl")
    reading = read([chat])
    config = Config(repeat_limit=3, progress=True)
    # Gemini CLI's calls 3 and 4 were blocked in the recording: no result of theirs goes in, so call 4 is
    # the fourth in a row with nothing new.
    assert [v.allowed for v in replay(reading, config, verdicts=True).verdicts or []] == [True, True, True, False]
    # Had call 3's blocked text been fed as its result, it would have looked like progress and let call 4 through.
    fed = dataclasses.replace(reading, results={**reading.results, 2: result_digest("Tool execution blocked")})
    assert [v.allowed for v in replay(fed, config, verdicts=True).verdicts or []] == [True] * 4


@pytest.mark.parametrize("fixture", ["transcripts", "replay_compare"])
def test_seed_verdicts_with_results_fed_equal_the_engines_without_results(fixture, capsys):
    path = FIXTURES / fixture
    reading = read([path])
    guard = Guard(Config())
    n: dict[str, int] = {}
    expected = []
    for c in reading.calls:
        v = guard.check(c.agent, c.tool, c.args, c.t)
        n[c.agent] = n.get(c.agent, 0) + 1
        expected.append([c.agent, n[c.agent], c.tool, "allow" if v.allowed else "deny", v.kind])
    assert reading.results  # results were there to be fed
    got = [list(v.values()) for v in verdict_lines([path, "--set", "preset=seed"], capsys)]
    assert got == expected


# -- warnings -------------------------------------------------------------------------------------


def test_verdicts_mark_allowed_calls_that_carried_a_warning_with_its_rule(capsys):
    # 3 in a row allowed, the last of them warned
    argv = [CORPUS / "loop-search.jsonl", "--set", "repeatLimit=3", "--set", "repeatWarn=1"]
    lines = verdict_lines(argv, capsys)
    assert lines[2] == {
        "agent": "agent-1",
        "index": 3,
        "tool": "web_search",
        "decision": "allow",
        "kind": None,
        "warn": True,
        "rule": "repeat",
    }
    assert [i for i, v in enumerate(lines, 1) if "warn" in v] == [3]
    assert list(lines[3]) == ["agent", "index", "tool", "decision", "kind"] and lines[3]["kind"] == "repeat"


def test_cycle_and_duplicate_warnings_name_their_rule(capsys):
    # A-B-A-B…: the call completing the third round (the 6th) denied, the 2 before it warned
    cycle = verdict_lines([CORPUS / "loop-cycle.jsonl", "--set", "cycleLimit=3", "--set", "cycleWarn=2"], capsys)
    assert [(v["index"], v["rule"]) for v in cycle if "warn" in v] == [(4, "cycle"), (5, "cycle")]
    assert denied(cycle)[0] == 6
    # Five calls in turn (no cycle up to cyclePeriod 4): each one's 5th and 6th of the 6 allowed are warned.
    rotation = verdict_lines([CORPUS / "loop-rotation.jsonl", "--set", "duplicateWarn=2"], capsys)
    assert [(v["index"], v["rule"]) for v in rotation if "warn" in v] == [(i, "duplicate") for i in range(21, 31)]
    assert denied(rotation)[0] == 31


def test_the_table_and_json_say_how_often_an_agent_was_warned(capsys):
    rules = [f"--set={item}" for item in split_setting(f"repeatLimit=3,{_RULES}")]
    code, out, _ = run([CORPUS / "loop-search.jsonl", *rules], capsys)
    assert code == 0
    assert "    warned on 1 call (repeat 1); the first at call 3: repeat 3/3" in out
    assert "  rules: repeatLimit 3, cycleLimit 3, progress\n" in out
    assert "  warn: duplicateWarn 2, repeatWarn 1, cycleWarn 2\n" in out
    preset = run([CORPUS / "loop-search.jsonl", "--set", "preset=recommended"], capsys)[1]
    assert "  rules: preset recommended, " in preset  # a preset other than the seed is named first
    doc = json.loads(run([CORPUS / "loop-search.jsonl", *rules, "--json"], capsys)[1])
    (agent,) = doc["agents"]
    assert (agent["warned"], agent["warnedByRule"], agent["results"]) == (1, {"repeat": 1}, 20)
    assert agent["firstWarning"]["index"] == 3 and agent["firstWarning"]["rule"] == "repeat"


def test_seed_tables_say_nothing_of_rules_or_warnings(capsys):
    out = run([CORPUS / "loop-search.jsonl"], capsys)[1]
    assert "rules:" not in out and "warn" not in out


# -- presets through --set ------------------------------------------------------------------------


def test_set_preset_brings_the_presets_values():
    config = load_config(sets=["preset=recommended"])[0]
    assert config == Config.with_preset("recommended") != Config()
    assert config.preset == "recommended"
    assert {key: getattr(config, BY_KEY[key].attr) for key in RECOMMENDED} == RECOMMENDED


def test_a_key_set_with_the_preset_wins_whatever_the_order():
    assert RECOMMENDED["repeatLimit"] != 5  # or the test could not tell which won
    for sets in (["repeatLimit=5", "preset=recommended"], ["preset=recommended", "repeatLimit=5"]):
        config = load_config(sets=sets)[0]
        assert (config.repeat_limit, config.cycle_limit) == (5, RECOMMENDED["cycleLimit"])


def test_a_preset_from_the_patch_layer_stays_under_set_and_its_own_keys_win_over_a_set_preset(tmp_path):
    env = {"DSH_HOME": str(tmp_path / "home")}
    layer = tmp_path / "p.yml"
    assert RECOMMENDED["repeatLimit"] != 4  # or the test could not tell which won
    layer.write_text("- id: circuit-breaker\n  config: {preset: recommended, repeatLimit: 4}\n")
    config = load_config([str(layer)], None, ["window=50"], env)[0]
    got = (config.preset, config.repeat_limit, config.progress, config.window)
    assert got == ("recommended", 4, RECOMMENDED["progress"], 50)
    layer.write_text("- id: circuit-breaker\n  config: {repeatLimit: 4}\n")
    config = load_config([str(layer)], None, ["preset=recommended"], env)[0]
    assert (config.repeat_limit, config.cycle_limit) == (4, RECOMMENDED["cycleLimit"])


# -- compare --------------------------------------------------------------------------------------


def compare_json(argv: list[Any], capsys) -> dict[str, Any]:
    code, out, err = run([*(x for s in SETTINGS for x in ("--compare", s)), *argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


# The synthetic corpus, per trace: its label and calls, then per setting (A, B, C) the first stop as
# "call kind", the first warning, and whether it was warned or denied by the manifest's expected_stop_by.
EXPECTED = {
    "loop-search.jsonl": ("loop", 20, ["7 duplicate", "4 repeat", "5 repeat"], [None, 3, 4], [False, True, False]),
    "loop-cycle.jsonl": ("loop", 20, ["13 duplicate", "6 cycle", "6 cycle"], [None, 4, 4], [False, True, True]),
    "loop-rotation.jsonl": ("loop", 40, ["31 duplicate"] * 3, [None, 21, 21], [False, False, False]),
    "loop-poll.jsonl": ("loop", 8, ["7 duplicate", "4 repeat", "5 repeat"], [None, 3, 4], [False, True, False]),
    "loop-short.jsonl": ("loop", 5, [None, "4 repeat", "5 repeat"], [None, 3, 4], [False, True, False]),
    "healthy-poll.jsonl": ("healthy", 10, ["7 duplicate", None, None], [None] * 3, [None] * 3),
    "healthy-work.jsonl": ("healthy", 18, [None] * 3, [None] * 3, [None] * 3),
    "healthy-status.jsonl": ("healthy", 6, [None, "5 repeat", None], [None, 4, 5], [None] * 3),
    "extra.jsonl": (None, 8, ["7 duplicate", "4 repeat", "5 repeat"], [None, 3, 4], [None] * 3),
}


def test_compare_gives_each_traces_first_stop_and_warning_under_each_setting(capsys):
    doc = compare_json([CORPUS], capsys)
    assert [s["setting"] for s in doc["settings"]] == SETTINGS
    assert [t["trace"] for t in doc["traces"]] == list(EXPECTED)  # the manifest's order, then the unlisted
    for k, setting in enumerate(doc["settings"]):
        got = {
            t["trace"]: (
                t["label"],
                t["calls"],
                f"{t['firstStop']} {t['kind']}" if t["firstStop"] else None,
                t["firstWarning"],
                t["inTime"],
                t["warnedFirst"],
            )
            for t in setting["traces"]
        }
        want = {
            name: (e[0], e[1], e[2][k], e[3][k], e[4][k], e[2][k] is not None and e[3][k] is not None)
            for name, e in EXPECTED.items()
        }
        assert got == want, setting["setting"]


def test_compare_sums_up_loops_and_healthy_runs_stopped_per_setting(capsys):
    doc = compare_json([CORPUS], capsys)
    summary = [(s["name"], s["loop"], s["healthy"], s["unlabelled"]) for s in doc["settings"]]

    def group(traces: int, stopped: int, median: float | None, warned_first: int, warned: int, in_time: int = 0):
        timed = traces if traces == 5 else 0  # every loop of the corpus names its expected_stop_by
        return {
            "traces": traces,
            "stopped": stopped,
            "medianFirstStop": median,
            "warnedFirst": warned_first,
            "inTime": in_time,
            "withExpectedStop": timed,
            "warned": warned,
        }

    assert summary == [
        # loops stop at 7, 13, 31, 7 (loop-short never); healthy-poll is stopped at 7; nothing warns
        ("A", group(5, 4, 10.0, 0, 0), group(3, 1, 7.0, 0, 0), group(1, 1, 7.0, 0, 0)),
        # loops at 4, 7, 31, 4, 4, each warned first; healthy-status is stopped at 5
        ("B", group(5, 5, 4.0, 5, 5, 4), group(3, 1, 5.0, 1, 1), group(1, 1, 4.0, 1, 1)),
        # loops at 5, 7, 31, 5, 5; healthy-status is warned, not stopped
        ("C", group(5, 5, 5.0, 5, 5, 1), group(3, 0, None, 0, 1), group(1, 1, 5.0, 1, 1)),
    ]
    rules = {"repeatWarn": 1, "cycleLimit": 3, "cycleWarn": 2, "duplicateWarn": 2, "progress": True}
    assert [s["config"] for s in doc["settings"]] == [{}, {"repeatLimit": 3, **rules}, {"repeatLimit": 4, **rules}]
    assert doc["errors"] == [] and doc["warnings"] == []


def test_a_settings_config_in_the_json_is_what_it_changes_over_its_preset(capsys):
    assert RECOMMENDED["repeatLimit"] != 4  # or repeatLimit would not show
    argv = ["--compare", "preset=recommended,repeatLimit=4", CORPUS / "loop-search.jsonl", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert json.loads(out)["settings"][0]["config"] == {"preset": "recommended", "repeatLimit": 4}


def test_compare_reads_the_manifests_fields_and_keeps_the_paths_as_given(capsys):
    traces = {t["trace"]: t for t in compare_json([CORPUS], capsys)["traces"]}
    poll = traces["loop-poll.jsonl"]
    assert poll["path"] == str(CORPUS / "loop-poll.jsonl")
    assert (poll["label"], poll["reason"]) == ("loop", "a poll whose answer never changes")
    assert poll["source"] == "https://example.org/synthetic/loop-poll"  # a source object: its url
    assert (poll["expectedStopBy"], poll["loopStartsAt"], poll["results"]) == (3, 1, 8)
    assert traces["extra.jsonl"]["expectedStopBy"] is None and traces["extra.jsonl"]["label"] is None


def test_compare_table(capsys):
    code, out, err = run([*(x for s in SETTINGS for x in ("--compare", s)), CORPUS], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "cbreplay --compare: 9 traces (5 loop, 3 healthy, 1 unlabelled), 3 settings"
    top = lines.index(next(line for line in lines if line.startswith("   setting")))
    assert lines[top - 1].split() == ["loops", "healthy", "healthy", "median", "warned", "in", "unlabelled"]
    assert lines[top].split() == ["setting", "stopped", "stopped", "warned", "stop", "first", "time", "stopped"]
    # A setting too long for its column is cut to fit 100 columns; the list at the end gives it whole.
    assert [line.split() for line in lines[top + 2 : top + 5]] == [
        ["A", "preset=seed", *"4 of 5 1 of 3 0 of 3 10 0 of 4 0 of 5 1 of 1".split()],
        ["B", "repeatLimit=3,repeatWarn=1…", *"5 of 5 1 of 3 1 of 3 4 5 of 5 4 of 5 1 of 1".split()],
        ["C", "repeatLimit=4,repeatWarn=1…", *"5 of 5 0 of 3 1 of 3 5 5 of 5 1 of 5 1 of 1".split()],
    ]
    assert len(lines[top]) == 100
    assert lines[-3:] == [f"  {name}: {setting}" for name, setting in zip("ABC", SETTINGS, strict=True)]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.startswith(("loop-", "healthy-", "extra"))}
    assert rows["healthy-status.jsonl"] == ["healthy", "6", "-", "-", "5", "rep*", "warn", "5"]
    assert rows["loop-cycle.jsonl"] == ["loop", "20", "6", "13", "dup", "6", "cyc*", "6", "cyc*"]
    assert rows["loop-short.jsonl"] == ["loop", "5", "3", "-", "4", "rep*", "5", "rep*"]
    assert max(map(len, lines)) <= 100


def test_files_given_one_by_one_take_their_labels_from_the_manifest_beside_them(capsys):
    doc = compare_json([CORPUS / "loop-short.jsonl", CORPUS / "healthy-poll.jsonl", CORPUS / "extra.jsonl"], capsys)
    assert [(t["trace"], t["label"]) for t in doc["traces"]] == [
        ("loop-short.jsonl", "loop"),
        ("healthy-poll.jsonl", "healthy"),
        (str(CORPUS / "extra.jsonl"), None),
    ]


def test_the_first_stop_counts_calls_over_the_whole_trace(tmp_path, capsys):
    # Two agents interleaved: b loops; its 7th call is the trace's 14th.
    rows = []
    for i in range(10):
        rows.append({"agent": "a", "tool": "read", "args": {"path": str(i)}})
        rows.append({"agent": "b", "tool": "grep", "args": {"pattern": "x"}})
    calls_file(tmp_path / "two.jsonl", rows)
    (tmp_path / "MANIFEST.json").write_text('[{"file": "two.jsonl", "label": "loop"}]')
    trace = compare_json([tmp_path], capsys)["settings"][0]["traces"][0]
    assert (trace["calls"], trace["firstStop"], trace["denied"]) == (20, 14, 4)


def test_a_claude_code_session_in_a_corpus_is_one_trace_with_its_subagents(tmp_path, capsys):
    write_claude(tmp_path, SESSION, [("Bash", {"command": "ls"})], subagents={"a1b2c3d": [("Grep", {"q": 1})] * 8})
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"traces": [{"file": f"{SESSION}.jsonl", "label": "loop"}]}))
    doc = compare_json([tmp_path], capsys)
    assert [(t["trace"], t["calls"], t["agents"]) for t in doc["traces"]] == [(f"{SESSION}.jsonl", 9, 2)]
    assert doc["settings"][0]["traces"][0]["firstStop"] == 8  # the session's call, then the subagent's 7th


def test_manifest_as_an_object_mapping_each_file_to_its_entry(tmp_path, capsys):
    calls_file(tmp_path / "x.jsonl", [{"agent": "a", "tool": "t", "args": {}}] * 7)
    (tmp_path / "MANIFEST.json").write_text('{"x.jsonl": {"label": "healthy", "reason": "r", "notes": [1]}}')
    (trace,) = compare_json([tmp_path], capsys)["traces"]
    assert (trace["label"], trace["reason"]) == ("healthy", "r")


def test_split_setting_keeps_lists_and_quoted_commas_whole():
    assert split_setting("preset=recommended, exempt=[a, b],ignoreArgs=['x,y'] ,") == [
        "preset=recommended",
        "exempt=[a, b]",
        "ignoreArgs=['x,y']",
    ]
    assert split_setting("") == []


# -- bad input ------------------------------------------------------------------------------------


def bad_corpus(tmp_path: Path) -> Path:
    calls_file(tmp_path / "ok.jsonl", [{"agent": "a", "tool": "t", "args": {}}] * 8)
    calls_file(tmp_path / "torn.jsonl", [{"agent": "a", "tool": "t", "args": {}}, "{torn", {"agent": "a"}])
    (tmp_path / "MANIFEST.json").write_text(
        "{\n"
        '  "traces": [\n'
        '    {"file": "ok.jsonl", "label": "loop"},\n'
        '    {"file": "gone.jsonl", "label": "loop"},\n'
        '    {"file": "torn.jsonl", "label": "stuck"},\n'
        '    {"label": "healthy"}\n'
        "  ]\n"
        "}\n"
    )
    return tmp_path


def test_bad_corpus_entries_are_named_with_file_and_line_and_the_rest_still_runs(tmp_path, capsys):
    root = bad_corpus(tmp_path)
    code, out, err = run(["--compare", "preset=seed", root], capsys)
    assert code == 1  # something was left out
    manifest = root / "MANIFEST.json"
    assert f"cbreplay: error: {manifest}:4: gone.jsonl: no such file" in err
    assert f"cbreplay: error: {manifest}:6: entry 4 names no file" in err
    assert f"cbreplay: warning: {manifest}:5: torn.jsonl: label 'stuck' is neither loop nor healthy" in err
    assert f"{root / 'torn.jsonl'}: line 2: not JSON" in err and f"{root / 'torn.jsonl'}: line 3: not a call" in err
    assert "Traceback" not in err
    assert "cbreplay --compare: 2 traces (1 loop, 0 healthy, 1 unlabelled), 1 setting" in out
    assert next(line for line in out.splitlines() if line.startswith("ok.jsonl")).split()[-2:] == ["7", "dup"]


def test_a_manifest_that_is_not_json_names_its_line(tmp_path, capsys):
    calls_file(tmp_path / "ok.jsonl", [{"agent": "a", "tool": "t", "args": {}}])
    (tmp_path / "MANIFEST.json").write_text('[\n  {"file": "ok.jsonl", "label": "loop"}\n  {"file": "x"}\n]\n')
    code, out, err = run(["--compare", "", tmp_path], capsys)
    assert code == 1 and f"{tmp_path / 'MANIFEST.json'}:3: not JSON" in err
    assert "1 trace (0 loop, 0 healthy, 1 unlabelled)" in out  # its files are still compared, unlabelled


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("preset=recommended,repeatLimit=x", "--compare 'preset=recommended,repeatLimit=x': repeatLimit: expected"),
        ("preset=strict", "--compare 'preset=strict': preset: expected one of seed, recommended"),
        ("repeatlimit=3", "did you mean repeatLimit?"),
        ("window", "--compare 'window': window: expected KEY=VALUE"),
    ],
)
def test_a_bad_compare_setting_is_a_clear_error_with_exit_code_2(capsys, setting, message):
    code, out, err = run(["--compare", "preset=seed", "--compare", setting, CORPUS], capsys)
    assert code == 2 and out == "" and message in err and "Traceback" not in err


def test_compare_refuses_verdicts_and_a_corpus_with_nothing_readable(tmp_path, capsys):
    code, _, err = run(["--compare", "", "--verdicts", CORPUS], capsys)
    assert code == 2 and "--compare prints a table (or --json)" in err
    code, _, err = run(["--compare", "", tmp_path / "nothing"], capsys)
    assert code == 2 and "no such file or directory" in err and "no trace could be read" in err


def test_read_corpus_reports_what_it_could_not_read_and_keeps_the_rest(tmp_path):
    corpus = read_corpus([bad_corpus(tmp_path)])
    assert [(t.name, t.label, t.reading is not None) for t in corpus.traces] == [
        ("ok.jsonl", "loop", True),
        ("gone.jsonl", "loop", False),
        ("torn.jsonl", None, True),
    ]
    assert len(corpus.errors) == 2 and len(corpus.warnings) == 1


def test_the_public_corpus_manifest_is_read_whole(capsys):
    corpus = FIXTURES / "corpus"
    if not (corpus / "MANIFEST.json").is_file():
        pytest.skip("tests/fixtures/corpus is not there")
    manifest = json.loads((corpus / "MANIFEST.json").read_text())
    doc = compare_json([corpus], capsys)
    assert doc["errors"] == [] and doc["warnings"] == []
    traces = {t["trace"]: t for t in doc["traces"]}
    assert set(traces) == {e["file"] for e in manifest}  # nothing unlisted, nothing left out
    for e in manifest:
        t = traces[e["file"]]
        assert (t["label"], t["reason"], t["source"]) == (e["label"], e["reason"], e["source"]["url"])
        assert t["expectedStopBy"] == (e.get("expected_stop_by") or {}).get("call")
        assert t["calls"] == e["calls"] and t["skippedLines"] == 0


def test_the_compare_example_in_docs_replay_md_is_what_the_command_prints(capsys, monkeypatch):
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)  # the example names the corpus from the repository's root
    docs = (root / "docs" / "replay.md").read_text()
    start = docs.index("$ cbreplay --compare ")
    block = docs[start : docs.index("```", start)].splitlines()
    command = ""
    while block[0].endswith("\\"):  # a command continued on the next line
        command += block.pop(0)[:-1]
    command += block.pop(0)
    prompt, program, *argv = shlex.split(command)
    assert (prompt, program) == ("$", "cbreplay") and "tests/fixtures/replay_compare" in argv
    code, out, _ = run(argv, capsys)
    assert code == 0 and out.splitlines() == block


def test_each_compare_setting_goes_on_top_of_the_set_and_patch_config(tmp_path, capsys):
    layer = tmp_path / "layer.yml"
    layer.write_text("- id: circuit-breaker\n  config: {duplicateLimit: 4}\n")
    argv = ["--patch", layer, "--set", "window=50", "--compare", "", "--compare", "duplicateLimit=2"]
    code, out, _ = run([*argv, CORPUS / "loop-search.jsonl", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0
    assert [s["config"] for s in doc["settings"]] == [
        {"duplicateLimit": 4, "window": 50},
        {"duplicateLimit": 2, "window": 50},
    ]
    assert [s["traces"][0]["firstStop"] for s in doc["settings"]] == [5, 3]
