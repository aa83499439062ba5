"""Each real harness against the fake model, with a stand-in guard: what it sends, how it denies, what
the model reads after a deny, how subagents are named, and how an agent can be stopped.

The stand-ins (tests/e2e/runs.py) deny the 3rd call of each agent with reason "STANDIN-DENY-3".
"""

from __future__ import annotations

import json
import re

import pytest

from .fakemodel import FakeModel, ModelRequest, loop_script
from .runs import (
    Run,
    dsh_sessions,
    read_dsh_session,
    run_claude,
    run_codex,
    run_dsh,
    run_gemini,
    stream_events,
)
from .scenarios import CLAUDE_SPAWN, DSH_SPAWN, claude_bash, dsh_bash, is_child, parent_child_script

pytestmark = pytest.mark.e2e

DENY = "STANDIN-DENY-3"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def results_after_each_call(requests: list[ModelRequest]) -> list[str]:
    """The tool result the model read after its 1st, 2nd, ... call (one conversation, one call per step)."""
    by_step: dict[int, str] = {}
    for r in requests:
        if r.prior_calls and r.tool_results:
            by_step.setdefault(r.prior_calls, r.tool_results[-1])
    return [by_step[k] for k in sorted(by_step)]


# --- dsh ------------------------------------------------------------------------------------------


def test_dsh_plugin_guard_denies_the_third_call_and_the_model_reads_the_reason(dsh, tmp_path, timed):
    with FakeModel(loop_script(5)) as fm:
        run = timed(run_dsh(dsh, fm, tmp_path))
    assert run.returncode == 0, run.describe()
    assert "Done: ran the probe 5 times." in run.stdout  # headless prints the last assistant text

    # What the plugin sees: one agent, a root, the exec fields the shim will use.
    calls = run.records("pre-execute")
    assert [c["n"] for c in calls] == [1, 2, 3, 4, 5], run.describe()
    first = calls[0]
    assert first["name"] == "bash"  # lower-case tool names
    assert first["arguments"] == {"command": "echo cbprobe4", "description": "Run probe step 1"}  # parsed JSON
    assert first["callId"] and first["rootCallId"] == first["callId"]
    assert {"callId", "rootCallId", "name", "arguments", "agent", "signal"} <= set(first["execKeys"])
    agent = first["agent"]
    assert re.fullmatch(f"session-{UUID}", agent["id"]), agent
    assert agent["header"]["id"] == agent["id"] == agent["sessionId"]
    assert "parentSession" not in agent["header"]
    assert {c["agent"]["id"] for c in calls} == {agent["id"]}
    assert [g["reason"] for g in run.records("guard")] == [None, None, DENY, None, None]
    assert [r["agent"]["id"] for r in run.records("agent/created")] == [agent["id"]]

    # What the model read: calls 1-2 ran, the 3rd was denied as `Error: <reason>`, then the loop went on.
    assert results_after_each_call(fm.agentic()) == [
        "cbprobe4\n",
        "cbprobe4\n",
        f"Error: {DENY}",
        "cbprobe4\n",
        "cbprobe4\n",
    ]

    # On disk: sessions/--<cwd>--/<agent id>/session.jsonl.zstd, the deny recorded as an error result.
    sessions = dsh_sessions(run)
    assert list(sessions) == [agent["id"]]
    path = sessions[agent["id"]]
    assert path.name == "session.jsonl.zstd"
    assert path.parent.parent.name == "--" + str(run.cwd).strip("/").replace("/", "-") + "--"
    records = read_dsh_session(path)
    assert records[0]["type"] == "session" and records[0]["id"] == agent["id"]
    tool_calls = [r["data"] for r in records if r["type"] == "tool/call"]
    assert [c["name"] for c in tool_calls] == ["bash"] * 5
    assert isinstance(tool_calls[0]["arguments"], str)  # a JSON string on disk, parsed in the plugin
    errors = [r for r in records if r["type"] == "tool/result" and r["data"]["message"]["content"][0]["isError"]]
    assert len(errors) == 1 and f"Error: {DENY}" in str(errors[0])
    assert records[-1]["type"] == "turn/end" and records[-1]["data"]["reason"]["kind"] == "completed"


def test_dsh_background_subagent_is_a_bare_uuid_with_its_parent_in_the_header(dsh, tmp_path, timed):
    log = tmp_path / "standin.jsonl"

    def child_ended() -> bool:
        return log.exists() and '"event":"subagent/end"' in log.read_text()

    script = parent_child_script(
        spawn=DSH_SPAWN,
        parent_call=dsh_bash("parent"),
        child_call=dsh_bash("child"),
        parent_calls=1,
        child_calls=4,
        child_ended=child_ended,
    )
    with FakeModel(script) as fm:
        run = timed(run_dsh(dsh, fm, tmp_path))
    assert run.returncode == 0, run.describe()

    calls = run.records("pre-execute")
    root = calls[0]["agent"]["id"]
    assert calls[0]["name"] == "subagent" and calls[0]["arguments"]["run_in_background"] is True
    child_calls = [c for c in calls if c["agent"]["id"] != root]
    assert len(child_calls) == 4, run.describe()
    child = child_calls[0]["agent"]
    assert re.fullmatch(UUID, child["id"]), child  # a bare uuid, no `session-` prefix
    assert child["header"]["parentSession"] == root
    assert child["header"]["origin"] == "subagent" and child["header"]["delegationDepth"] == 1
    assert [c["n"] for c in child_calls] == [1, 2, 3, 4]  # the stand-in counts per agent

    # The guard saw both agents and denied each one's 3rd call; the child's model read its deny.
    denied = [(g["agent"], g["reason"]) for g in run.records("guard") if g["reason"]]
    assert sorted(denied) == sorted([(root, DENY), (child["id"], DENY)])
    child_requests = [r for r in fm.agentic() if is_child(r)]
    assert results_after_each_call(child_requests)[:3] == ["cbprobe4\n", "cbprobe4\n", f"Error: {DENY}"]

    # What tells a plugin that an agent ended: subagent/start+end (with stopReason) and agent/disposed.
    start, end = run.records("subagent/start"), run.records("subagent/end")
    assert [s["info"]["id"] for s in start] == [child["id"]] and start[0]["info"]["provider"] == "spawn"
    assert [e["info"]["id"] for e in end] == [child["id"]] and end[0]["info"]["stopReason"] == "completed"
    assert end[0]["info"]["runId"] == start[0]["info"]["runId"]
    assert child["id"] in [d["agent"]["id"] for d in run.records("agent/disposed")]

    # The parent was told, at its next step, in the notice's own words.
    assert fm.containing(f"Background subagent {child['id']} finished"), run.describe()

    # On disk: the child's session sits beside the parent's, its header naming the parent.
    sessions = dsh_sessions(run)
    assert set(sessions) == {root, child["id"]}
    header = read_dsh_session(sessions[child["id"]])[0]
    assert header["parentSession"] == root and header["origin"] == "subagent"


def test_dsh_cancel_from_pre_execute_stops_a_looping_root_agent(dsh, tmp_path, timed):
    with FakeModel(loop_script(50)) as fm:
        run = timed(run_dsh(dsh, fm, tmp_path, cancel_at=3))
    # Headless dsh prints nothing and exits 1 when the turn did not complete.
    assert run.returncode == 1, run.describe()
    assert run.stdout.strip() == ""
    assert len(fm.agentic()) == 3, run.describe()  # no model request after the cancelled call
    assert [c["n"] for c in run.records("pre-execute")] == [1, 2, 3]
    (path,) = dsh_sessions(run).values()
    end = [r for r in read_dsh_session(path) if r["type"] == "turn/end"]
    assert end[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "hook", "reason": "STANDIN-CANCEL"}}


def test_dsh_cancel_of_a_looping_subagent_ends_it_and_tells_the_parent(dsh, tmp_path, timed):
    log = tmp_path / "standin.jsonl"

    def child_ended() -> bool:
        return log.exists() and '"event":"subagent/end"' in log.read_text()

    script = parent_child_script(
        spawn=DSH_SPAWN,
        parent_call=dsh_bash("parent"),
        child_call=dsh_bash("child"),
        parent_calls=1,
        child_calls=50,
        child_ended=child_ended,
    )
    with FakeModel(script) as fm:
        run = timed(run_dsh(dsh, fm, tmp_path, deny_at=(), cancel_at=3, cancel_subagents_only=True))
    assert run.returncode == 0, run.describe()  # the parent's turn completed
    assert "parent done" in run.stdout
    child_requests = [r for r in fm.agentic() if is_child(r)]
    assert len(child_requests) == 3, run.describe()  # the child's loop stopped at the cancelled call
    (end,) = run.records("subagent/end")
    assert end["info"]["stopReason"] == "aborted"
    child_id = end["info"]["id"]
    assert fm.containing(f"Background subagent {child_id} was stopped before it finished"), run.describe()
    child_log = read_dsh_session(dsh_sessions(run)[child_id])
    turn_end = [r for r in child_log if r["type"] == "turn/end"][-1]
    assert turn_end["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "hook", "reason": "STANDIN-CANCEL"}}


def test_dsh_compression_none_writes_plain_session_jsonl(dsh, tmp_path, timed):
    with FakeModel(loop_script(3)) as fm:
        run = timed(run_dsh(dsh, fm, tmp_path, compression="none"))
    assert run.returncode == 0, run.describe()
    (path,) = dsh_sessions(run).values()
    assert path.name == "session.jsonl"
    lines = path.read_text().splitlines()
    assert '"type":"session"' in lines[0]
    assert sum('"type":"tool/call"' in line for line in lines) == 3


# --- Claude Code ---------------------------------------------------------------------------------


def claude_transcript(run: Run, session_id: str):  # type: ignore[no-untyped-def]
    (path,) = run.paths["projects"].glob(f"*/{session_id}.jsonl")
    return path


def test_claude_pretooluse_deny_blocks_the_third_call_and_the_model_reads_the_reason(claude, tmp_path, timed):
    with FakeModel(loop_script(5)) as fm:
        run = timed(run_claude(claude, fm, tmp_path))
    assert run.returncode == 0, run.describe()
    calls = run.tool_calls()
    assert [c["_n"] for c in calls] == [1, 2, 3, 4, 5], run.describe()
    first = calls[0]
    for key in (
        "session_id",
        "transcript_path",
        "cwd",
        "prompt_id",
        "permission_mode",
        "hook_event_name",
        "tool_name",
        "tool_input",
        "tool_use_id",
    ):
        assert key in first, (key, first)
    assert first["hook_event_name"] == "PreToolUse" and first["tool_name"] == "Bash"
    assert first["tool_input"] == {"command": "echo cbprobe4", "description": "Run probe step 1"}
    assert "agent_id" not in first  # only subagents carry one
    assert first["cwd"] == str(run.cwd)
    assert len({c["tool_use_id"] for c in calls}) == 5

    assert results_after_each_call(fm.agentic()) == [
        "cbprobe4",
        "cbprobe4",
        f"PreToolUse:Bash hook error: {DENY}",
        "cbprobe4",
        "cbprobe4",
    ]
    result = [e for e in stream_events(run) if e.get("type") == "result"][-1]
    assert result["result"] == "Done: ran the probe 5 times." and result["terminal_reason"] == "completed"
    assert [d["tool_use_id"] for d in result["permission_denials"]] == [calls[2]["tool_use_id"]]

    (end,) = run.records("SessionEnd")
    assert end["session_id"] == first["session_id"] and end["reason"]
    path = claude_transcript(run, first["session_id"])
    assert str(path) == first["transcript_path"]
    assert f"PreToolUse:Bash hook error: {DENY}" in path.read_text()


def _claude_child_ended(tmp_path):  # type: ignore[no-untyped-def]
    log = tmp_path / "standin.jsonl"
    return lambda: log.exists() and '"hook_event_name": "SubagentStop"' in log.read_text()


def test_claude_subagent_hooks_carry_agent_id_and_the_parents_session_id(claude, tmp_path, timed):
    script = parent_child_script(
        spawn=CLAUDE_SPAWN,
        parent_call=claude_bash("parent"),
        child_call=claude_bash("child"),
        parent_calls=1,
        child_calls=4,
        child_ended=_claude_child_ended(tmp_path),
    )
    with FakeModel(script) as fm:
        run = timed(run_claude(claude, fm, tmp_path))
    assert run.returncode == 0, run.describe()
    calls = run.tool_calls()
    parent = [c for c in calls if "agent_id" not in c]
    child = [c for c in calls if "agent_id" in c]
    assert parent[0]["tool_name"] == "Agent" and parent[0]["tool_input"]["subagent_type"] == "general-purpose"
    assert [c["_n"] for c in child] == [1, 2, 3, 4], run.describe()
    session = parent[0]["session_id"]
    agent_id = child[0]["agent_id"]
    assert {c["session_id"] for c in calls} == {session}  # the subagent keeps the parent's session_id
    assert {c["agent_id"] for c in child} == {agent_id} and re.fullmatch(r"a[0-9a-f]{16}", agent_id), agent_id
    assert {c["agent_type"] for c in child} == {"general-purpose"}

    (start,) = run.records("SubagentStart")
    (stop,) = run.records("SubagentStop")
    assert start["agent_id"] == stop["agent_id"] == agent_id
    assert stop["agent_transcript_path"].endswith(f"/{session}/subagents/agent-{agent_id}.jsonl")

    child_requests = [r for r in fm.agentic() if is_child(r)]
    assert results_after_each_call(child_requests)[:3] == [
        "cbprobe4",
        "cbprobe4",
        f"PreToolUse:Bash hook error: {DENY}",
    ]
    main = claude_transcript(run, session)
    sub = main.parent / session / "subagents" / f"agent-{agent_id}.jsonl"
    assert sub.exists() and f"hook error: {DENY}" in sub.read_text()
    # The parent hears of the child through a task notification (a new turn in -p mode).
    assert fm.containing(f"<task-id>{agent_id}</task-id>"), run.describe()


def test_claude_continue_false_stops_the_loop_but_the_call_still_runs(claude, tmp_path, timed):
    with FakeModel(loop_script(10)) as fm:
        run = timed(run_claude(claude, fm, tmp_path, fmt="stop"))
    assert run.returncode == 0, run.describe()
    assert len(fm.agentic()) == 3, run.describe()  # no model request after the 3rd call
    assert [c["_n"] for c in run.tool_calls()] == [1, 2, 3]
    result = [e for e in stream_events(run) if e.get("type") == "result"][-1]
    assert result["terminal_reason"] == "hook_stopped" and result["result"] == "" and not result["is_error"]
    assert result["permission_denials"] == []
    session = run.tool_calls()[0]["session_id"]
    text = claude_transcript(run, session).read_text()
    # `continue: false` alone does not deny: the 3rd call ran; the stop reason goes to the transcript only.
    tool_results = [e for e in stream_events(run) if e.get("type") == "user"]
    assert [e["message"]["content"][0]["content"] for e in tool_results] == ["cbprobe4"] * 3
    assert "hook stopped continuation: STANDIN-STOP-3" in text
    assert not fm.containing("STANDIN-STOP-3")  # the model never reads it


def test_claude_continue_false_with_a_deny_stops_the_loop_and_blocks_the_call(claude, tmp_path, timed):
    with FakeModel(loop_script(10)) as fm:
        run = timed(run_claude(claude, fm, tmp_path, fmt="stop+deny"))
    assert run.returncode == 0, run.describe()
    assert len(fm.agentic()) == 3, run.describe()
    result = [e for e in stream_events(run) if e.get("type") == "result"][-1]
    assert result["terminal_reason"] == "hook_stopped"
    assert [d["tool_use_id"] for d in result["permission_denials"]] == [run.tool_calls()[2]["tool_use_id"]]
    tool_results = [e for e in stream_events(run) if e.get("type") == "user"]
    assert tool_results[-1]["message"]["content"][0]["content"] == f"PreToolUse:Bash hook error: {DENY}"


def test_claude_continue_false_in_a_subagent_stops_only_the_subagent(claude, tmp_path, timed):
    log = tmp_path / "standin.jsonl"

    def child_stopped() -> bool:
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return any(r.get("agent_id") and r["_n"] == 3 for r in records)

    script = parent_child_script(
        spawn=CLAUDE_SPAWN,
        parent_call=claude_bash("parent"),
        child_call=claude_bash("child"),
        parent_calls=1,
        child_calls=10,
        child_ended=child_stopped,
        settle=1.0,
    )
    with FakeModel(script) as fm:
        run = timed(run_claude(claude, fm, tmp_path, fmt="stop+deny", only_subagents=True))
    assert run.returncode == 0, run.describe()
    child = [c for c in run.tool_calls() if "agent_id" in c]
    assert [c["_n"] for c in child] == [1, 2, 3], run.describe()
    assert len([r for r in fm.agentic() if is_child(r)]) == 3  # the child's loop ended at the stop
    results = [e for e in stream_events(run) if e.get("type") == "result"]
    assert results[-1]["result"] == "parent done" and results[-1]["terminal_reason"] == "completed"
    # Observed in 2.1.332: a subagent stopped this way gets no SubagentStop hook (a completed one does),
    # so a guard must not rely on SubagentStop to forget an agent it stopped.
    assert run.records("SubagentStop") == [], "Claude Code now sends SubagentStop here: update tests/e2e/README.md"
    assert fm.containing("<status>completed</status>"), run.describe()


# --- Codex CLI -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["claude", "block"])
def test_codex_pretooluse_deny_blocks_the_third_call_and_the_model_reads_the_reason(codex, tmp_path, timed, fmt):
    with FakeModel(loop_script(5)) as fm:
        run = timed(run_codex(codex, fm, tmp_path, fmt=fmt))
    assert run.returncode == 0, run.describe()
    calls = run.tool_calls()
    assert [c["_n"] for c in calls] == [1, 2, 3, 4, 5], run.describe()
    first = calls[0]
    for key in (
        "session_id",
        "turn_id",
        "transcript_path",
        "cwd",
        "hook_event_name",
        "model",
        "permission_mode",
        "tool_name",
        "tool_input",
        "tool_use_id",
    ):
        assert key in first, (key, first)
    assert first["tool_name"] == "Bash" and first["tool_input"] == {"command": "echo cbprobe4"}
    assert first["tool_use_id"].startswith("call_")  # the model's call_id
    assert fm.agentic()[0].tools[0] == "exec_command"
    results = results_after_each_call(fm.agentic())
    assert "cbprobe4" in results[0] and "cbprobe4" in results[1]
    assert results[2] == f"Command blocked by PreToolUse hook: {DENY}. Command: echo cbprobe4"
    assert "cbprobe4" in results[3]
    rollout = sorted(run.paths["sessions"].glob("*/*/*/rollout-*.jsonl"))
    assert [str(p) for p in rollout] == [first["transcript_path"]]
    assert first["session_id"] in rollout[0].name


# --- Gemini CLI ----------------------------------------------------------------------------------


def test_gemini_beforetool_deny_blocks_the_third_call_and_the_model_reads_the_reason(gemini, tmp_path, timed):
    with FakeModel(loop_script(4)) as fm:  # descriptions differ, so Gemini's loop detector stays quiet
        run = timed(run_gemini(gemini, fm, tmp_path))
    assert run.returncode == 0, run.describe()
    calls = run.tool_calls()
    assert [c["_n"] for c in calls] == [1, 2, 3, 4], run.describe()
    first = calls[0]
    for key in ("session_id", "transcript_path", "cwd", "hook_event_name", "timestamp", "tool_name", "tool_input"):
        assert key in first, (key, first)
    assert first["hook_event_name"] == "BeforeTool" and first["tool_name"] == "run_shell_command"
    assert first["tool_input"] == {"command": "echo cbprobe4", "description": "Run probe step 1"}
    assert "tool_use_id" not in first  # no call id
    routers = [r for r in fm.requests if r.dialect == "gemini-json"]
    assert routers, "Gemini CLI no longer asks its router: check fakemodel._gemini_json_answer"
    results = results_after_each_call(fm.agentic())
    assert "cbprobe4" in results[0] and "cbprobe4" in results[1]
    assert results[2] == f"Tool execution blocked: {DENY}"
    assert "cbprobe4" in results[3]
    (chat,) = run.paths["gemini_dir"].glob("tmp/*/chats/session-*.jsonl")
    assert str(chat) == first["transcript_path"]
    assert f"Tool execution blocked: {DENY}" in chat.read_text()
    (end,) = run.records("SessionEnd")
    assert end["session_id"] == first["session_id"]
