"""cbreplay on transcripts recorded with the real harnesses (tests/fixtures/transcripts, see its README).

In each recording a stand-in guard denied a looping agent's calls by number (7-10 for dsh and
Claude Code's subagent, 7-8 for Codex, 3-4 for Gemini CLI). Those calls are exact repeats once
`description` is left out, so the real breaker, replayed with the matching duplicateLimit, must deny
exactly the calls the harness denied — read here straight from the files, not through our readers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard

from breaker import Config, Guard, hook
from breaker.replay import replay
from breaker.replaycli import main
from breaker.transcripts import _frame_end, harness_of, read
from tests.test_hook import SAMPLES, samples

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"


def jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def dsh_records(path: Path) -> list[dict]:
    data = path.read_bytes()
    if path.suffix == ".zstd":
        data = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(data)
    return jsonl(data)


def verdicts(argv: list, capsys) -> dict[str, list[int]]:
    """Agent -> the call numbers `cbreplay --verdicts` denies."""
    assert main([*map(str, argv), "--verdicts"]) == 0
    out: dict[str, list[int]] = {}
    for line in capsys.readouterr().out.splitlines():
        v = json.loads(line)
        out.setdefault(v["agent"], [])
        if v["decision"] == "deny":
            out[v["agent"]].append(v["index"])
    return out


# -- dsh ------------------------------------------------------------------------------------------


def dsh_denied_by_harness(path: Path) -> list[int]:
    """Call numbers (from 1) whose tool/result is an error, paired by callId."""
    records = dsh_records(path)
    calls = [r["data"]["callId"] for r in records if r["type"] == "tool/call"]
    failed = {
        r["data"]["message"]["content"][0]["toolCallId"]
        for r in records
        if r["type"] == "tool/result" and r["data"]["message"]["content"][0].get("isError")
    }
    return [i for i, c in enumerate(calls, 1) if c in failed]


@pytest.mark.parametrize("kind", ["dsh-zstd", "dsh-plain"])
def test_real_dsh_tree_gives_a_root_and_its_subagent_with_the_seeds_columns(kind):
    reading = read([FIXTURES / kind / "sessions"])
    assert len(reading.agents) == 2 and reading.warnings == [] and reading.skipped_count == 0
    (root,) = [a for a in reading.agents.values() if a.parent is None]
    (child,) = [a for a in reading.agents.values() if a.parent is not None]
    assert root.id.startswith("session-") and child.parent == root.id
    assert Path(child.source).parent.name == child.id  # the session directory is named after the agent
    assert [c.tool for c in reading.calls if c.agent == root.id] == ["subagent", "bash", "bash", "bash"]
    assert [c.tool for c in reading.calls if c.agent == child.id] == ["bash"] * 10
    assert child.failed == 4 and root.failed == 0
    assert 0 < child.run_time < 60 and 0 < root.run_time < 60
    rows = {r.agent.id: r for r in replay(reading, Config()).rows}
    assert rows[child.id].worst == 10  # ten `echo cbprobe4`, each with a new description
    assert rows[root.id].calls == 4 and rows[root.id].denied == 0


@pytest.mark.parametrize("kind", ["dsh-zstd", "dsh-plain"])
def test_real_dsh_replay_denies_exactly_the_calls_the_harness_denied(kind, capsys):
    files = sorted((FIXTURES / kind / "sessions").glob("--*--/*/session.jsonl*"))
    expected = {f.parent.name: dsh_denied_by_harness(f) for f in files}
    assert sorted(map(len, expected.values())) == [0, 4]
    assert verdicts([FIXTURES / kind], capsys) == expected


def test_real_dsh_description_trap_hides_the_loop_without_ignore_args(capsys):
    denied = verdicts([FIXTURES / "dsh-zstd", "--set", "ignoreArgs=[]"], capsys)
    assert all(v == [] for v in denied.values())  # the seed's first version: it never tripped


def test_real_dsh_zstd_file_is_many_frames_and_all_of_them_are_read():
    (child,) = [f for f in (FIXTURES / "dsh-zstd" / "sessions").glob("--*--/*/session.jsonl.zstd")
                if not f.parent.name.startswith("session-")]  # fmt: skip
    data = child.read_bytes()
    frames, at = 0, 0
    while at < len(data):
        at = _frame_end(data, at)
        assert at > 0
        frames += 1
    assert frames > 2  # header frame, then one per append batch
    reading = read([child])
    assert len(reading.calls) == 10 and reading.warnings == []
    assert dsh_records(child)[-1]["type"] == "turn/end"


def test_real_dsh_zstd_cut_short_gives_the_calls_before_the_cut_and_a_warning(tmp_path):
    (child,) = [f for f in (FIXTURES / "dsh-zstd" / "sessions").glob("--*--/*/session.jsonl.zstd")
                if not f.parent.name.startswith("session-")]  # fmt: skip
    whole = read([child]).calls
    data = child.read_bytes()
    cut = tmp_path / child.parent.name / "session.jsonl.zstd"
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) * 2 // 3])
    reading = read([cut])
    assert 0 < len(reading.calls) < len(whole)
    assert [c.args for c in reading.calls] == [c.args for c in whole[: len(reading.calls)]]
    assert any("cut off" in w for w in reading.warnings)


def test_real_dsh_plain_and_zstd_recordings_read_alike():
    z, p = read([FIXTURES / "dsh-zstd"]), read([FIXTURES / "dsh-plain"])
    assert [(c.tool, c.args) for c in z.calls] == [(c.tool, c.args) for c in p.calls]


# -- Claude Code ----------------------------------------------------------------------------------


def claude_denied_by_harness(path: Path) -> list[int]:
    lines = jsonl(path.read_bytes())
    uses = [b["id"] for r in lines if r.get("type") == "assistant" for b in r["message"]["content"]
            if b.get("type") == "tool_use"]  # fmt: skip
    failed = {b["tool_use_id"] for r in lines if r.get("type") == "user" and isinstance(r["message"]["content"], list)
              for b in r["message"]["content"] if b.get("type") == "tool_result" and b.get("is_error")}  # fmt: skip
    return [i for i, u in enumerate(uses, 1) if u in failed]


def claude_files() -> tuple[Path, Path, str]:
    """The recorded session file, its subagent's file, and the subagent's id as cbhook sends it."""
    (main_file,) = sorted((FIXTURES / "claude" / "projects").glob("*/*.jsonl"))
    (sub_file,) = main_file.parent.glob(f"{main_file.stem}/subagents/agent-*.jsonl")
    return main_file, sub_file, f"{main_file.stem}/{sub_file.stem.removeprefix('agent-')}"


def test_real_claude_session_file_brings_its_subagent_linked_to_the_session():
    main_file, _sub_file, sub_id = claude_files()
    reading = read([main_file])
    assert list(reading.agents) == [main_file.stem, sub_id]
    sub = reading.agents[sub_id]
    assert sub.parent == main_file.stem and sub.failed == 4
    assert [c.tool for c in reading.calls if c.agent == main_file.stem] == ["Agent", "Bash", "Bash", "Bash"]
    assert [c.tool for c in reading.calls if c.agent == sub.id] == ["Bash"] * 10
    assert reading.skipped_count == 0  # attachment, api-request, system… lines are passed over, not malformed


def test_real_claude_replay_denies_exactly_the_calls_the_harness_denied(capsys):
    main_file, sub_file, sub_id = claude_files()
    expected = {main_file.stem: claude_denied_by_harness(main_file), sub_id: claude_denied_by_harness(sub_file)}
    assert expected[sub_id] == [7, 8, 9, 10]
    assert verdicts([FIXTURES / "claude"], capsys) == expected


# -- Codex, Gemini CLI ----------------------------------------------------------------------------


def test_real_codex_rollout_replay_denies_the_two_calls_codex_blocked(capsys):
    (rollout,) = (FIXTURES / "codex" / "sessions").glob("*/*/*/rollout-*.jsonl")
    reading = read([rollout])
    (agent,) = reading.agents.values()
    assert rollout.stem.endswith(agent.id)
    assert [(c.tool, c.args) for c in reading.calls] == [("exec_command", {"cmd": "echo cbprobe4"})] * 8
    assert agent.failed == 2  # "Command blocked by PreToolUse hook: …" outputs: Codex sets no error flag
    assert verdicts([rollout], capsys) == {agent.id: [7, 8]}


def test_real_gemini_chat_keeps_the_last_record_of_each_message_and_replays_like_the_harness(capsys):
    (chat,) = (FIXTURES / "gemini" / "tmp").glob("*/chats/session-*.jsonl")
    reading = read([chat])
    (agent,) = reading.agents.values()
    # Each model message is written twice (without, then with its toolCalls): four calls, not more.
    assert [c.tool for c in reading.calls] == ["run_shell_command"] * 4
    assert [c.args["description"] for c in reading.calls] == [f"Run probe step {i}" for i in range(1, 5)]
    assert agent.failed == 2 and 0 < agent.run_time < 60
    assert verdicts([chat, "--set", "duplicateLimit=2"], capsys) == {agent.id: [3, 4]}


# -- all of them ----------------------------------------------------------------------------------


def test_every_real_recording_at_once_is_one_table_within_100_columns(capsys):
    code = main([str(FIXTURES)])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "8 agents, 54 tool calls, from 8 files (claude-code, codex, dsh, gemini-cli)" in out
    assert max(map(len, out.splitlines())) <= 100
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("agent ")) + 2
    agents = [line.split()[0] for line in lines[top : top + 8]]
    main_file, sub_file, _sub_id = claude_files()
    subagent = sub_file.stem.removeprefix("agent-")
    assert agents[:2] == [main_file.stem[:8], f"{main_file.stem[:8]}/{subagent[:7]}"]  # a session, then its subagent


def test_real_recordings_verdicts_equal_the_engines_own_decisions(capsys):
    reading = read([FIXTURES])
    guard = Guard(Config())
    expected = []
    n: dict[str, int] = {}
    for c in reading.calls:
        v = guard.check(c.agent, c.tool, c.args, c.t)
        n[c.agent] = n.get(c.agent, 0) + 1
        expected.append([c.agent, n[c.agent], c.tool, "allow" if v.allowed else "deny", v.kind])
    assert main([str(FIXTURES), "--verdicts"]) == 0
    got = [list(json.loads(line).values()) for line in capsys.readouterr().out.splitlines()]
    assert got == expected and len(got) == 54


# -- one agent, one id: live (cbhook, the dsh plugin) and in replay --------------------------------


def live_calls(harness: str) -> tuple[dict[str, tuple], set[str]]:
    """What cbhook sends for each agent of a recording, {agent: (harness, parent, [(tool, args)])},
    and the agents its end events forget. The hook payloads (tests/e2e/samples) were recorded in the
    same runs as the transcripts in tests/fixtures/transcripts."""
    agents: dict[str, tuple] = {}
    ended = set()
    for event in samples(harness):
        harness = hook.detect(event)
        action, request = hook.parse_event(harness, event)
        if action == "check":
            agents.setdefault(request.agent, (harness, request.parent, []))[2].append((request.tool, request.args))
        elif action == "end":
            ended.add(request.agent)
    return agents, ended


def replayed_calls(paths: list[Path]) -> dict[str, tuple]:
    """What cbreplay --feed sends for each agent of the same recording, in the same shape."""
    reading = read(paths)
    agents: dict[str, tuple] = {}
    for c in reading.calls:
        info = reading.agents[c.agent]
        agents.setdefault(c.agent, (harness_of(info.format), info.parent, []))[2].append((c.tool, c.args))
    return agents


def test_a_claude_code_subagent_has_one_id_live_and_in_replay():
    main_file, _sub_file, sub_id = claude_files()
    live, ended = live_calls("claude-code")
    assert replayed_calls([main_file]) == live  # ids, parents, harness, and every call with its args
    assert set(live) == {main_file.stem, sub_id} and live[sub_id][1] == main_file.stem
    assert ended == {main_file.stem, sub_id}  # SubagentStop and SessionEnd forget the agents replay knows


@pytest.mark.parametrize(("harness", "pattern"), [("codex", "codex/**/*.jsonl"), ("gemini-cli", "gemini/**/*.jsonl")])
def test_codex_and_gemini_cli_agents_have_one_id_live_and_in_replay(harness, pattern):
    (path,) = FIXTURES.glob(pattern)
    live, replayed = live_calls(harness)[0], replayed_calls([path])
    assert {a: (h, p, len(c)) for a, (h, p, c) in live.items()} == {
        a: (h, p, len(c)) for a, (h, p, c) in replayed.items()
    }
    if harness == "gemini-cli":  # Codex's hook names the shell tool `Bash` where its rollout says `exec_command`
        assert live == replayed


def test_dsh_agents_have_one_id_live_and_in_replay():
    # The stand-in plugin of the recording saw what the dsh plugin reads: exec.agent.id, header.parentSession.
    live: dict[str, tuple] = {}
    for line in (SAMPLES / "dsh-zstd-plugin-records.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["event"] == "pre-execute":
            agent = record["agent"]
            entry = live.setdefault(agent["id"], ("dsh", agent["header"].get("parentSession"), []))
            entry[2].append((record["name"], record["arguments"]))
    assert replayed_calls([FIXTURES / "dsh-zstd"]) == live
