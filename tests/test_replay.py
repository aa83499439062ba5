"""cbreplay on synthetic transcripts written as the harnesses write them (INTEGRATIONS.md, dsh's own format docs).

The builders below are also used by tests/bench/bench_replay.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from breaker import Config, Guard
from breaker.replay import load_config, render_table, replay, short_ids
from breaker.replaycli import main
from breaker.transcripts import TranscriptError, decompress, read

T0_MS = 1_790_000_000_000  # 2026-09-21, epoch milliseconds as dsh writes them


# -- builders: dsh sessions -----------------------------------------------------------------------


def dsh_lines(
    agent_id: str,
    calls: list[tuple[str, Any]],
    *,
    parent: str | None = None,
    t0_ms: int = T0_MS,
    gap_ms: int = 1000,
    errors: frozenset[int] = frozenset(),
) -> list[bytes]:
    """A dsh session log as JSON lines: header, then per call a step with chunks, the call and its result.

    `calls` are (tool, args); args are written as dsh does, a JSON string in `data.arguments`.
    `errors` holds the 0-based call numbers whose result is an error (`isError` on the result block).
    """
    header: dict[str, Any] = {"type": "session", "version": 0, "id": agent_id, "createdAt": t0_ms, "cwd": "/work"}
    if parent is not None:
        header.update(parentSession=parent, origin="subagent", delegationDepth=1)
    else:
        header["delegationDepth"] = 0
    lines = [header]
    seq = 0
    t = t0_ms

    def event(typ: str, data: dict[str, Any]) -> None:
        nonlocal seq
        lines.append({"type": typ, "seq": seq, "time": t, "data": data})
        seq += 1

    event("turn/start", {"turn": 1})
    for i, (tool, args) in enumerate(calls):
        t = t0_ms + (i + 1) * gap_ms
        call_id = f"call_{i:05d}"
        event("step/start", {"turn": 1, "step": i + 1})
        arguments = args if isinstance(args, str) else json.dumps(args)
        lines.append(  # a packed run of argument deltas, as dsh stores chunk runs
            {
                "type": "tool-call-chunks",
                "seq0": seq,
                "time0": t,
                "data": {"turn": 1, "step": i + 1, "id": call_id, "name": tool, "args": [arguments], "dt": []},
            }
        )
        seq += 1
        event("tool/call", {"turn": 1, "step": i + 1, "callId": call_id, "name": tool, "arguments": arguments})
        failed = i in errors
        block = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": [{"type": "text", "text": "Error: no such file" if failed else "ok"}],
        }
        if failed:
            block["isError"] = True
        event(
            "tool/result",
            {
                "turn": 1,
                "step": i + 1,
                "message": {
                    "id": f"m{i}",
                    "role": "user",
                    "content": [block],
                    "source": {"kind": "tool", "callId": call_id},
                },
            },
        )
        event("step/end", {"turn": 1, "step": i + 1})
    event("turn/end", {"turn": 1, "reason": "completed"})
    return [orjson.dumps(obj) for obj in lines]


def zstd_frames(lines: list[bytes], frames: int = 4) -> bytes:
    """dsh's artifact: one checksummed frame holding the header line, then one frame per append batch."""
    c = zstandard.ZstdCompressor(write_checksum=True)
    out = [c.compress(lines[0] + b"\n")]
    rest = lines[1:]
    size = max(1, -(-len(rest) // max(1, frames - 1)))
    for i in range(0, len(rest), size):
        out.append(c.compress(b"".join(line + b"\n" for line in rest[i : i + size])))
    return b"".join(out)


def write_dsh(
    root: Path, agent_id: str, calls: list[tuple[str, Any]], *, zstd: bool = True, frames: int = 4, **kw: Any
) -> Path:
    """Write a session where dsh would: <root>/--work--/<agent id>/session.jsonl[.zstd]."""
    lines = dsh_lines(agent_id, calls, **kw)
    d = root / "--work--" / agent_id
    d.mkdir(parents=True, exist_ok=True)
    if zstd:
        path = d / "session.jsonl.zstd"
        path.write_bytes(zstd_frames(lines, frames))
    else:
        path = d / "session.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


# -- builders: Claude Code transcripts ------------------------------------------------------------


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def claude_lines(
    session: str,
    calls: list[tuple[str, Any]],
    *,
    agent_id: str | None = None,
    t0: float = T0_MS / 1000,
    gap: float = 2.0,
    errors: frozenset[int] = frozenset(),
    repeat_blocks: bool = False,
) -> list[bytes]:
    """A Claude Code transcript: assistant lines with one tool_use block each, user lines with its tool_result.

    `agent_id` makes it a subagent's transcript (isSidechain, agentId). `repeat_blocks` writes every
    assistant line twice, as a rewritten streamed message would be.
    """
    common: dict[str, Any] = {"sessionId": session, "cwd": "/work", "version": "2.1.332", "userType": "external"}
    common["isSidechain"] = agent_id is not None
    if agent_id is not None:
        common["agentId"] = agent_id
    out: list[dict[str, Any]] = [
        {"type": "queue-operation", "operation": "enqueue", "timestamp": _iso(t0), "sessionId": session},
        {**common, "type": "user", "uuid": "u0", "timestamp": _iso(t0), "message": {"role": "user", "content": "go"}},
    ]
    for i, (tool, args) in enumerate(calls):
        t = t0 + (i + 1) * gap
        use_id = f"toolu_{session[:4]}{agent_id or ''}{i:05d}"
        assistant = {
            **common,
            "type": "assistant",
            "uuid": f"a{i}",
            "timestamp": _iso(t),
            "message": {
                "id": f"msg_{i}",
                "role": "assistant",
                "content": [{"type": "tool_use", "id": use_id, "name": tool, "input": args}],
            },
        }
        out.append(assistant)
        if repeat_blocks:
            out.append(assistant)
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id, "content": "ok"}
        if i in errors:
            result.update(content="Exit code 1", is_error=True)
        out.append(
            {
                **common,
                "type": "user",
                "uuid": f"r{i}",
                "timestamp": _iso(t + 0.5),
                "message": {"role": "user", "content": [result]},
            }
        )
    return [orjson.dumps(o) for o in out]


def write_claude(project: Path, session: str, calls: list[tuple[str, Any]], subagents: dict[str, list] | None = None):
    """<project>/<session>.jsonl plus <project>/<session>/subagents/agent-<id>.jsonl per subagent."""
    project.mkdir(parents=True, exist_ok=True)
    main_path = project / f"{session}.jsonl"
    main_path.write_bytes(b"\n".join(claude_lines(session, calls)) + b"\n")
    for agent_id, sub_calls in (subagents or {}).items():
        sub = project / session / "subagents"
        sub.mkdir(parents=True, exist_ok=True)
        lines = claude_lines(session, sub_calls, agent_id=agent_id, t0=T0_MS / 1000 + 10)
        (sub / f"agent-{agent_id}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return main_path


def search(q: str) -> tuple[str, dict[str, Any]]:
    return ("web_search", {"queries": [q]})


ROOT_A = "session-3f1c9a2e-8b4d-4e6f-9a1b-2c3d4e5f6a7b"
SUB_B = "7d2e4f6a-1b3c-4d5e-8f9a-0b1c2d3e4f5a"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- dsh ------------------------------------------------------------------------------------------


def test_dsh_zstd_session_over_many_frames_is_read_whole(tmp_path):
    calls = [("bash", {"command": f"ls {i}"}) for i in range(40)]
    path = write_dsh(tmp_path, ROOT_A, calls, frames=9)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())  # first frame alone: header
    reading = read([path])
    assert [c.args for c in reading.calls] == [a for _, a in calls]
    assert reading.agents[ROOT_A].calls == 40
    assert reading.warnings == []


def test_dsh_plain_and_zstd_sessions_give_the_same_calls_and_times(tmp_path):
    calls = [search("qwen loops"), ("read", {"path": "/a"}), ("bash", {"command": "echo hi", "description": "x"})]
    z = read([write_dsh(tmp_path / "z", ROOT_A, calls, zstd=True)])
    p = read([write_dsh(tmp_path / "p", ROOT_A, calls, zstd=False)])
    assert z.calls == p.calls
    assert [c.t for c in z.calls] == [(T0_MS + 1000 * (i + 1)) / 1000 for i in range(3)]
    assert z.agents[ROOT_A].run_time == p.agents[ROOT_A].run_time == 3.0  # createdAt .. the last record


def test_dsh_arguments_json_string_is_parsed_and_a_non_json_string_kept_as_is(tmp_path):
    path = write_dsh(tmp_path, ROOT_A, [("bash", {"command": "ls", "n": [1, {"b": 2}]}), ("bash", "{not json")])
    assert [c.args for c in read([path]).calls] == [{"command": "ls", "n": [1, {"b": 2}]}, "{not json"]


def test_dsh_failed_results_are_counted_from_is_error(tmp_path):
    path = write_dsh(tmp_path, ROOT_A, [("read", {"path": str(i)}) for i in range(10)], errors=frozenset({2, 5, 7}))
    assert read([path]).agents[ROOT_A].failed == 3


def test_truncated_zstd_stream_gives_what_was_readable_and_a_warning(tmp_path, capsys):
    calls = [("bash", {"command": f"step {i}"}) for i in range(60)]
    path = write_dsh(tmp_path, ROOT_A, calls, frames=6)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # cut inside the last frame, as a crash mid-append leaves it
    reading = read([path])
    assert 40 <= len(reading.calls) < 60
    assert [c.args for c in reading.calls] == [a for _, a in calls[: len(reading.calls)]]
    assert any("cut off" in w for w in reading.warnings)
    code, out, err = run([path], capsys)
    assert code == 0 and "cut off" in err and f"{len(reading.calls)} tool calls" in out


def test_corrupt_zstd_frame_keeps_the_frames_before_it_and_warns(tmp_path):
    calls = [("bash", {"command": f"step {i}"}) for i in range(30)]
    path = write_dsh(tmp_path, ROOT_A, calls, frames=4)
    data = bytearray(path.read_bytes())
    data[-30] ^= 0xFF  # inside the last frame: its checksum no longer matches
    path.write_bytes(bytes(data))
    reading = read([path])
    assert 0 < len(reading.calls) < 30
    assert any("unreadable" in w for w in reading.warnings)


def test_decompress_reads_every_concatenated_frame():
    c = zstandard.ZstdCompressor()
    data = b"".join(c.compress(f"frame {i}\n".encode()) for i in range(5))
    assert decompress(data) == (b"".join(f"frame {i}\n".encode() for i in range(5)), None)


def test_whole_dsh_sessions_tree_links_subagents_to_parents(tmp_path, capsys):
    write_dsh(tmp_path, ROOT_A, [("subagent", {"task": "research"})] * 2)
    write_dsh(tmp_path, SUB_B, [search("q")] * 9, parent=ROOT_A)
    other = "session-00000000-0000-4000-8000-000000000000"
    write_dsh(tmp_path, other, [("read", {"path": "x"})], zstd=False)
    reading = read([tmp_path])
    assert reading.agents[SUB_B].parent == ROOT_A
    assert reading.agents[ROOT_A].parent is None
    code, out, _ = run([tmp_path], capsys)
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith(("session-", "7d2e4f6a"))]
    # The subagent's row follows its parent's and names it in the parent column.
    assert rows[0].startswith("session-00000000") or rows[0].startswith("session-3f1c9a2e")
    sub_row = next(r for r in rows if r.startswith("7d2e4f6a"))
    assert sub_row.split()[1] == "session-3f1c9a2e"
    order = [r.split()[0] for r in rows[:3]]
    assert order.index("7d2e4f6a") == order.index("session-3f1c9a2e") + 1


# -- Claude Code ----------------------------------------------------------------------------------

SESSION = "5b8e2c1d-9f3a-4b6c-8d7e-1a2b3c4d5e6f"


def test_claude_session_file_brings_its_subagents_along(tmp_path):
    main_path = write_claude(
        tmp_path,
        SESSION,
        [("Task", {"prompt": "look"}), ("Bash", {"command": "ls"})],
        subagents={"a1b2c3d": [("WebSearch", {"query": "q"})] * 3, "e4f5a6b": [("Read", {"file_path": "/x"})]},
    )
    reading = read([main_path])
    # The ids cbhook gives these agents live: the session, and `<session>/<agent_id>` for a subagent.
    assert list(reading.agents) == [SESSION, f"{SESSION}/a1b2c3d", f"{SESSION}/e4f5a6b"]
    assert reading.agents[f"{SESSION}/a1b2c3d"].parent == SESSION
    assert [c.tool for c in reading.calls if c.agent == f"{SESSION}/a1b2c3d"] == ["WebSearch"] * 3
    assert {a.format for a in reading.agents.values()} == {"claude-code"}


def test_a_claude_subagent_file_read_alone_is_named_by_its_session_directory(tmp_path):
    write_claude(tmp_path, SESSION, [("Bash", {"command": "ls"})], subagents={"a1b2c3d": [("Read", {})]})
    sub_file = tmp_path / SESSION / "subagents" / "agent-a1b2c3d.jsonl"
    lines = [orjson.loads(line) for line in sub_file.read_bytes().splitlines()]
    for line in lines:  # lines that name neither the session nor the agent
        line.pop("sessionId", None), line.pop("agentId", None)
    sub_file.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    (agent,) = read([sub_file]).agents.values()
    assert (agent.id, agent.parent) == (f"{SESSION}/a1b2c3d", SESSION)


def test_claude_project_directory_reads_each_file_once(tmp_path):
    main_path = write_claude(tmp_path, SESSION, [("Bash", {"command": "ls"})], subagents={"a1": [("Read", {})]})
    reading = read([tmp_path, main_path])
    assert len(reading.calls) == 2 and len(reading.files) == 2


def test_claude_tool_use_block_written_twice_counts_once(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(claude_lines(SESSION, [("Bash", {"command": "ls"})] * 3, repeat_blocks=True)))
    assert len(read([path]).calls) == 3


def test_claude_failed_calls_come_from_is_error_results(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(claude_lines(SESSION, [("Bash", {"command": "x"})] * 6, errors=frozenset({0, 4}))))
    assert read([path]).agents[SESSION].failed == 2


def test_claude_run_time_is_last_minus_first_timestamp(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(claude_lines(SESSION, [("Bash", {"command": "x"})] * 5, gap=3.0)))
    assert read([path]).agents[SESSION].run_time == pytest.approx(15.5)


# -- other formats, detection, bad input ----------------------------------------------------------


def test_codex_rollout_calls_and_failures_are_read(tmp_path):
    lines = [
        {"timestamp": "2026-11-02T10:00:00.000Z", "type": "session_meta", "payload": {"id": "cx-1", "cwd": "/w"}},
        {
            "timestamp": "2026-11-02T10:00:01.000Z",
            "type": "response_item",
            "payload": {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"ls"}', "call_id": "c1"},
        },
        {
            "timestamp": "2026-11-02T10:00:02.000Z",
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "c1", "output": "Exit code: 2\nWall time: 0s"},
        },
        {
            "timestamp": "2026-11-02T10:00:09.000Z",
            "type": "response_item",
            "payload": {"type": "web_search_call", "action": {"type": "search", "query": "q"}},
        },
    ]
    path = tmp_path / "rollout-2026-11-02T10-00-00-cx-1.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines))
    reading = read([path])
    assert [(c.tool, c.args) for c in reading.calls] == [
        ("exec_command", {"cmd": "ls"}),
        ("web_search", {"type": "search", "query": "q"}),
    ]
    assert reading.agents["cx-1"].failed == 1 and reading.agents["cx-1"].run_time == 9.0


def test_gemini_chat_file_calls_and_failures_are_read(tmp_path):
    doc = {
        "sessionId": "gm-1",
        "projectHash": "abc",
        "startTime": "2026-11-02T10:00:00.000Z",
        "lastUpdated": "2026-11-02T10:01:00.000Z",
        "messages": [
            {"id": "1", "timestamp": "2026-11-02T10:00:00.000Z", "type": "user", "content": "go"},
            {
                "id": "2",
                "timestamp": "2026-11-02T10:00:05.000Z",
                "type": "gemini",
                "content": "",
                "toolCalls": [
                    {"id": "t1", "name": "google_web_search", "args": {"query": "q"}, "status": "success"},
                    {"id": "t2", "name": "run_shell_command", "args": {"command": "false"}, "status": "error"},
                ],
            },
        ],
    }
    path = tmp_path / "session-2026-11-02T10-00-gm1.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    reading = read([path])
    assert [c.tool for c in reading.calls] == ["google_web_search", "run_shell_command"]
    assert reading.agents["gm-1"].failed == 1 and reading.agents["gm-1"].run_time == 60.0


def calls_file(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_calls_jsonl_malformed_lines_are_skipped_counted_and_reported_with_line_numbers(tmp_path, capsys):
    path = calls_file(
        tmp_path / "calls.jsonl",
        [
            {"agent": "a", "tool": "bash", "args": {"command": "ls"}},
            "{truncated",
            {"agent": "a", "tool": "bash", "args": {"command": "ls"}, "t": 5},
            [1, 2],
            {"agent": "a"},
            "",
            {"agent": "b", "tool": "read", "args": {}, "t": "soon"},
            {"agent": "b", "tool": "read"},
        ],
    )
    reading = read([path])
    assert len(reading.calls) == 3
    assert [(s.line, s.reason.split(" ")[0]) for s in reading.skipped] == [
        (2, "not"),
        (4, "not"),
        (5, "not"),
        (7, '"t"'),
    ]
    code, out, err = run([path], capsys)
    assert code == 0 and "3 tool calls" in out
    assert "skipped 4 malformed line(s)" in err
    for n in (2, 4, 5, 7):
        assert f"calls.jsonl: line {n}:" in err


def test_unknown_format_is_a_clear_error_with_exit_code_2(tmp_path, capsys):
    path = tmp_path / "notes.jsonl"
    path.write_text('{"hello": "world"}\nplain text\n')
    code, out, err = run([path], capsys)
    assert code == 2 and out == ""
    assert "unknown format" in err and "--format" in err and str(path) in err


def test_missing_path_and_empty_directory_are_clear_errors(tmp_path, capsys):
    assert run([tmp_path / "nope"], capsys)[2].startswith("cbreplay: error: ")
    (tmp_path / "empty").mkdir()
    code, _, err = run([tmp_path / "empty"], capsys)
    assert code == 2 and "no transcript files" in err


def test_directory_walk_passes_over_files_that_are_not_transcripts(tmp_path):
    write_dsh(tmp_path, ROOT_A, [("bash", {"command": "ls"})])
    (tmp_path / "settings.json").write_text('{"theme": "dark"}')
    (tmp_path / "junk.jsonl").write_text("not json\n")
    reading = read([tmp_path])
    assert len(reading.files) == 1 and reading.skipped_count == 0
    assert any("passed over 1 file(s)" in w for w in reading.warnings)  # junk.jsonl; a .json is expected


def test_format_flag_forces_a_format_detection_would_not_choose(tmp_path):
    # A dsh session without its header line: detection still sees dsh records; forcing calls fails them all.
    lines = dsh_lines(ROOT_A, [("bash", {"command": "ls"})])[1:]
    path = tmp_path / "x" / "session.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"\n".join(lines))
    assert [c.tool for c in read([path]).calls] == ["bash"]
    assert read([path], "dsh").agents["x"].calls == 1  # named after its directory
    forced = read([path], "calls")
    assert forced.calls == [] and forced.skipped_count == len(lines)


def test_unknown_format_name_is_refused(tmp_path):
    with pytest.raises(TranscriptError, match="unknown format 'vim'"):
        read([tmp_path], "vim")


@pytest.mark.parametrize("name", ["claude-code", "claude"])
def test_format_names_are_the_harness_names_and_the_old_ones_still_work(tmp_path, capsys, name):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(claude_lines(SESSION, [("Bash", {"command": "ls"})])))
    assert read([path], name).files == [(str(path), "claude-code")]
    code, out, _ = run([path, "--format", name, "--json"], capsys)
    assert code == 0 and json.loads(out)["files"] == [{"path": str(path), "format": "claude-code"}]
    with pytest.raises(SystemExit) as exit_:
        main([str(path), "--format", "vim"])
    assert exit_.value.code == 2 and "--format {dsh,claude-code,codex,gemini-cli,calls}" in capsys.readouterr().err


def test_binary_garbage_does_not_crash(tmp_path, capsys):
    path = tmp_path / "blob.jsonl"
    path.write_bytes(bytes(random.Random(1).randrange(256) for _ in range(4096)))
    assert run([path], capsys)[0] == 2
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 50)  # zstd magic, then nonsense
    code, _, err = run([path], capsys)
    assert code == 2 and "the zstd stream" in err and "nothing in it is readable" in err


# -- the replay -----------------------------------------------------------------------------------


def test_verdicts_equal_the_engines_own_decisions_for_the_same_sequences(tmp_path, capsys):
    rng = random.Random(7)
    tools = ["bash", "web_search", "read", "todo_write"]
    rows = []
    for _ in range(3000):
        agent = rng.choice(["a", "b", "c"])
        tool = rng.choice(tools)
        args = {"q": rng.randrange(12), "description": rng.randrange(3)}
        rows.append({"agent": agent, "tool": tool, "args": args})
    path = calls_file(tmp_path / "calls.jsonl", rows)
    for sets in ([], ["duplicateLimit=3", "window=20", "maxCallsPerAgent=500"], ["ignoreArgs=[]", "exempt=[bash]"]):
        config, _, _ = load_config(sets=sets)
        guard = Guard(config)
        counts: dict[str, int] = {}
        expected = []
        for r in rows:
            v = guard.check(r["agent"], r["tool"], r["args"])
            counts[r["agent"]] = counts.get(r["agent"], 0) + 1
            expected.append(
                {
                    "agent": r["agent"],
                    "index": counts[r["agent"]],
                    "tool": r["tool"],
                    "decision": "allow" if v.allowed else "deny",
                    "kind": v.kind,
                }
            )
        code, out, _ = run([path, "--verdicts", *(x for s in sets for x in ("--set", s))], capsys)
        got = [json.loads(line) for line in out.splitlines()]
        assert code == 0 and got == expected
        assert {g["decision"] for g in got} == {"allow", "deny"}


def test_first_deny_gives_call_number_time_into_run_kind_and_the_call(tmp_path):
    calls = [("read", {"path": "/a"})] * 3 + [search("qwen loops")] * 10
    reading = read([write_dsh(tmp_path, ROOT_A, calls, gap_ms=2000)])
    (row,) = replay(reading, Config()).rows
    d = row.first_deny
    assert d is not None
    assert (d.index, d.kind, d.count, d.limit, d.tool, d.args) == (10, "duplicate", 6, 6, "web_search", calls[-1][1])
    assert d.after == 20.0  # call 10 is at createdAt + 10 * 2 s
    assert row.denied == 4 and row.denied_by_kind == {"duplicate": 4}


def test_cap_deny_is_reported_when_varied_args_slip_past_the_duplicate_check(tmp_path):
    calls = [("bash", {"command": f"echo {i}"}) for i in range(12)]
    reading = read([write_dsh(tmp_path, ROOT_A, calls)])
    (row,) = replay(reading, Config(max_calls_per_agent=10)).rows
    assert row.first_deny is not None and (row.first_deny.index, row.first_deny.kind) == (11, "cap")
    assert row.denied_by_kind == {"cap": 2}


def test_worst_repetition_compares_calls_with_ignore_args_stripped(tmp_path):
    calls = [("bash", {"command": "echo cbprobe4", "description": f"Run probe step {i}"}) for i in range(10)]
    reading = read([write_dsh(tmp_path, ROOT_A, calls)])
    assert replay(reading, Config()).rows[0].worst == 10
    assert replay(reading, Config(ignore_args=())).rows[0].worst == 1


def test_searches_count_queries_and_distinct_ignores_key_order(tmp_path):
    calls = [
        ("web_search", {"queries": ["a", "b"]}),
        ("web_search", {"queries": ["a", "a"]}),  # dsh collapses a repeated query: one search
        ("WebSearch", {"query": "c", "allowed_domains": []}),
        ("web_search", {"max_results": 5, "queries": ["b"]}),
        ("bash", {"command": "web_search"}),
    ]
    reading = read([write_dsh(tmp_path, ROOT_A, calls)])
    row = replay(reading, Config()).rows[0]
    assert (row.searches, row.distinct_searches) == (5, 3)


def test_search_tool_option_adds_a_search_tool(tmp_path, capsys):
    path = calls_file(tmp_path / "c.jsonl", [{"agent": "a", "tool": "brave", "args": {"query": "x"}}] * 2)
    out = run([path, "--json", "--search-tool", "brave"], capsys)[1]
    assert json.loads(out)["agents"][0]["searches"] == 2


def seed_agents(tmp_path: Path) -> Path:
    """Agents shaped like the seed's A and B: a healthy start, then one query repeated hundreds of times."""
    rng = random.Random(3)
    a = [search(f"topic {i}") for i in range(20)] + [search("the 555 query")] * 555
    a += [("web_fetch", {"url": f"https://example.org/{rng.randrange(50)}"}) for _ in range(51)]
    b = [search(f"other {i}") for i in range(43)] + [search("the 1000 query")] * 1000
    b += [("bash", {"command": "ls", "description": f"look {i}"}) for i in range(184)]
    write_dsh(tmp_path, ROOT_A, [("subagent", {"task": "a"}), ("subagent", {"task": "b"})])
    write_dsh(tmp_path, "a0000000-0000-4000-8000-00000000000a", a, parent=ROOT_A, gap_ms=3170)
    write_dsh(tmp_path, "b0000000-0000-4000-8000-00000000000b", b, parent=ROOT_A, gap_ms=3325)
    return tmp_path


def test_table_shows_the_seed_columns_and_where_each_agent_would_stop(tmp_path, capsys):
    code, out, err = run([seed_agents(tmp_path)], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("agent"))
    for column in ("parent", "run time", "calls", "searches (distinct)", "worst rep", "failed", "denied"):
        assert column in header
    a = next(line for line in lines if line.startswith("a0000000 "))
    assert a.split()[1:] == ["session-3f1c9a2e", "33m", "04s", "626", "575", "(21)", "555", "0", "549"]
    b = next(line for line in lines if line.startswith("b0000000 "))
    assert b.split()[1:] == ["session-3f1c9a2e", "1h", "08m", "1,227", "1,043", "(44)", "1,000", "0", "1,172"]
    at = lines.index("a0000000: first deny at call 27, 1m 26s in: duplicate 6/6")
    assert lines[at + 1 : at + 4] == [
        '    web_search queries=["the 555 query"]',
        "    would have denied 549 of 626 calls (duplicate 549)",
        '    worst repetition 555x: web_search queries=["the 555 query"]',
    ]
    # b's bash calls differ only in `description` (an ignoreArgs name): denied after six, like its searches.
    assert "    would have denied 1,172 of 1,227 calls (duplicate 1,172)" in lines
    assert max(len(line) for line in lines) <= 100


def test_json_output_carries_each_agents_row_and_first_deny(tmp_path, capsys):
    code, out, _ = run([seed_agents(tmp_path), "--json", "--set", "duplicateLimit=3"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["config"]["duplicateLimit"] == 3
    a = next(x for x in doc["agents"] if x["agent"].startswith("a0000000"))
    assert a["parent"] == ROOT_A and a["calls"] == 626 and a["worstRepetition"]["count"] == 555
    assert a["firstDeny"]["index"] == 24 and a["firstDeny"]["kind"] == "duplicate"
    assert a["firstDeny"]["preview"] == 'web_search queries=["the 555 query"]'
    assert doc["denied"] == sum(x["denied"] for x in doc["agents"])


def test_untrusted_names_and_args_are_printed_as_plain_text(tmp_path, capsys):
    evil = "\x1b]0;pwned\x07bash\u202e[red]"
    path = calls_file(tmp_path / "c.jsonl", [{"agent": "a\x1b[2J", "tool": evil, "args": {"c": "\x1b[31mx"}}] * 8)
    code, out, _ = run([path], capsys)
    assert code == 0
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07bash\\u202e[red]" in out


def test_short_ids_keep_uuids_apart_and_show_full_ids_when_they_would_collide():
    names = short_ids([ROOT_A, SUB_B, "x" * 30, "deadbeef-0000-4000-8000-000000000001", "deadbeef-1111-4000-8000-0"])
    assert names[ROOT_A] == "session-3f1c9a2e" and names[SUB_B] == "7d2e4f6a"
    assert short_ids([f"{SESSION}/a9729039715f7050c"]) == {f"{SESSION}/a9729039715f7050c": "5b8e2c1d/a972903"}
    assert names["x" * 30] == "x" * 15 + "…"
    clash = short_ids(["deadbeef-0000-4000-8000-000000000001", "deadbeef-1111-4000-8000-000000000002"])
    assert set(clash.values()) == set(clash)


def test_agents_without_timestamps_show_no_run_time(tmp_path):
    path = calls_file(tmp_path / "c.jsonl", [{"agent": "a", "tool": "bash", "args": {}}] * 8)
    result = replay(read([path]), Config())
    table = render_table(result)
    row = next(line for line in table.splitlines() if line.startswith("a "))
    assert row.split()[2] == "-" and "a: first deny at call 7: duplicate 6/6" in table


# -- the config -----------------------------------------------------------------------------------


def test_set_values_are_yaml_and_override_the_patch_file(tmp_path):
    patch = tmp_path / "ours.yml"
    patch.write_text("- id: circuit-breaker\n  config:\n    duplicateLimit: 4\n    window: 50\n")
    env = {"DSH_HOME": str(tmp_path / "home")}
    config, origin, _ = load_config([str(patch)], None, ["window=30", "exempt=[a, b]", "enabled=true"], env)
    assert (config.duplicate_limit, config.window, config.exempt) == (4, 30, ("a", "b"))
    assert str(patch) in origin and "--set window=30" in origin


def test_profile_reads_the_dsh_home_profile_layer(tmp_path):
    layer = tmp_path / "profiles" / "web" / "cordis.patch.yml"
    layer.parent.mkdir(parents=True)
    layer.write_text("- id: circuit-breaker\n  config: {maxCallsPerAgent: 40}\n")
    config, _, _ = load_config([], "web", [], {"DSH_HOME": str(tmp_path)})
    assert config.max_calls_per_agent == 40


def test_without_patch_or_profile_the_built_in_defaults_apply_whatever_dsh_home_holds(tmp_path, monkeypatch):
    (tmp_path / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config: {duplicateLimit: 2}\n")
    monkeypatch.setenv("DSH_HOME", str(tmp_path))
    assert load_config()[0] == Config()


def test_disabled_row_replays_with_the_guard_off(tmp_path, capsys):
    patch = tmp_path / "off.yml"
    patch.write_text("- id: circuit-breaker\n  disabled: true\n")
    path = calls_file(tmp_path / "c.jsonl", [{"agent": "a", "tool": "bash", "args": {}}] * 10)
    code, out, err = run([path, "--patch", patch], capsys)
    assert code == 0 and "no deny, all 10 calls allowed" in out and "disabled" in err


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["duplicateLimit=0"], "duplicateLimit: expected an integer from 1"),
        (["duplicatelimit=3"], "did you mean duplicateLimit?"),
        (["window"], "expected KEY=VALUE"),
        (["exempt=[a, "], "expected a YAML value"),
        (["window=ten"], "window: expected an integer"),
    ],
)
def test_bad_config_values_are_a_clear_error_with_exit_code_2(tmp_path, capsys, sets, message):
    path = calls_file(tmp_path / "c.jsonl", [{"agent": "a", "tool": "bash", "args": {}}])
    code, out, err = run([path, *(x for s in sets for x in ("--set", s))], capsys)
    assert code == 2 and out == "" and message in err


def test_broken_patch_file_is_a_clear_error_naming_file_and_line(tmp_path, capsys):
    patch = tmp_path / "bad.yml"
    patch.write_text("- id: circuit-breaker\n  config:\n    window: 0\n")
    path = calls_file(tmp_path / "c.jsonl", [{"agent": "a", "tool": "bash", "args": {}}])
    code, _, err = run([path, "--patch", patch], capsys)
    assert code == 2 and f"{patch}:3: window: expected an integer" in err


def test_cbreplay_console_script_runs(tmp_path):
    path = calls_file(tmp_path / "c.jsonl", [{"agent": "a", "tool": "bash", "args": {}}] * 7)
    out = subprocess.run(
        [sys.executable, "-m", "breaker.replaycli", str(path), "--verdicts"], capture_output=True, text=True, check=True
    ).stdout
    assert [json.loads(line)["decision"] for line in out.splitlines()] == ["allow"] * 6 + ["deny"]


# -- robustness -----------------------------------------------------------------------------------


def _read_or_refuse(path: Path) -> None:
    try:
        read([path])
    except TranscriptError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000))
def test_reading_arbitrary_bytes_raises_nothing_but_a_transcript_error(tmp_path, data):
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    _read_or_refuse(path)


_VALID = zstd_frames(dsh_lines(ROOT_A, [search(f"q{i % 3}") for i in range(30)], errors=frozenset({4})), 5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, len(_VALID)), flips=st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(1, 255))))
def test_damaged_zstd_sessions_give_a_prefix_of_the_calls_or_a_clear_error(tmp_path, cut, flips):
    data = bytearray(_VALID[:cut])
    for at, bits in flips:
        if at < len(data):
            data[at] ^= bits
    path = tmp_path / ROOT_A / "session.jsonl.zstd"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(bytes(data))
    try:
        reading = read([path])
    except TranscriptError:
        return
    if not flips:  # only cut: every call read is one that was written, in order
        full = read_bytes_calls(_VALID, tmp_path)
        assert reading.calls == full[: len(reading.calls)]


def read_bytes_calls(data: bytes, tmp: Path) -> list:
    path = tmp / "whole" / "session.jsonl.zstd"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return read([path]).calls


def test_an_unreadable_file_inside_a_tree_is_passed_over_with_a_warning(tmp_path):
    write_dsh(tmp_path, ROOT_A, [("bash", {"command": "ls"})])
    bad = tmp_path / "--work--" / SUB_B / "session.jsonl"
    bad.parent.mkdir(parents=True)
    bad.symlink_to(tmp_path / "gone")  # listed by the walk, unreadable (whoever runs the test)
    reading = read([tmp_path])
    assert len(reading.calls) == 1
    assert any(str(bad) in w and "cannot be read" in w for w in reading.warnings)
