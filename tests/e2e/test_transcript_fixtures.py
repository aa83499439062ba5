"""The recorded transcript fixtures are whole and say what their README says (no harness needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .runs import read_dsh_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("kind, name", [("dsh-zstd", "session.jsonl.zstd"), ("dsh-plain", "session.jsonl")])
def test_dsh_fixture_is_a_parent_and_a_looping_subagent_with_four_denied_calls(kind, name):
    files = sorted((FIXTURES / kind / "sessions").glob(f"--*--/*/{name}"))
    assert len(files) == 2, files
    logs = {f.parent.name: read_dsh_session(f) for f in files}
    (root,) = [i for i in logs if i.startswith("session-")]
    (child,) = [i for i in logs if i != root]
    assert logs[root][0]["type"] == "session" and "parentSession" not in logs[root][0]
    assert logs[child][0]["parentSession"] == root and logs[child][0]["origin"] == "subagent"

    def calls(i: str) -> list[str]:
        return [r["data"]["name"] for r in logs[i] if r["type"] == "tool/call"]

    def denied(i: str) -> int:
        results = [r["data"]["message"]["content"][0] for r in logs[i] if r["type"] == "tool/result"]
        return sum(1 for c in results if c["isError"] and c["content"][0]["text"].startswith("Error: STANDIN-DENY"))

    assert calls(root) == ["subagent", "bash", "bash", "bash"] and denied(root) == 0
    assert calls(child) == ["bash"] * 10 and denied(child) == 4


def test_claude_fixture_is_a_session_with_one_subagent_whose_last_four_calls_were_denied():
    (main,) = sorted((FIXTURES / "claude" / "projects").glob("*/*.jsonl"))
    (sub,) = sorted(main.parent.glob(f"{main.stem}/subagents/agent-*.jsonl"))
    agent_id = sub.stem.removeprefix("agent-")

    def tool_uses(lines: list[dict]) -> list[str]:
        return [b["name"] for r in lines if r.get("type") == "assistant" for b in r["message"]["content"]
                if b.get("type") == "tool_use"]  # fmt: skip

    def errors(lines: list[dict]) -> list[str]:
        return [b["content"] for r in lines if r.get("type") == "user" and isinstance(r["message"]["content"], list)
                for b in r["message"]["content"] if b.get("type") == "tool_result" and b.get("is_error")]  # fmt: skip

    main_lines, sub_lines = jsonl(main), jsonl(sub)
    assert tool_uses(main_lines) == ["Agent", "Bash", "Bash", "Bash"] and errors(main_lines) == []
    assert tool_uses(sub_lines) == ["Bash"] * 10
    assert [e.split(":")[0] for e in errors(sub_lines)] == ["PreToolUse"] * 4
    assert {r["agentId"] for r in sub_lines if "agentId" in r} == {agent_id}
    assert {r["sessionId"] for r in sub_lines if "sessionId" in r} == {main.stem}


def test_codex_fixture_is_one_rollout_of_eight_calls_the_last_two_blocked():
    (rollout,) = sorted((FIXTURES / "codex" / "sessions").glob("*/*/*/rollout-*.jsonl"))
    items = [r["payload"] for r in jsonl(rollout) if r.get("type") == "response_item"]
    assert [i["name"] for i in items if i.get("type") == "function_call"] == ["exec_command"] * 8
    outputs = [str(i["output"]) for i in items if i.get("type") == "function_call_output"]
    assert [o.startswith("Command blocked by PreToolUse hook: STANDIN-DENY") for o in outputs] == [False] * 6 + [
        True
    ] * 2


def test_gemini_fixture_is_one_chat_of_four_calls_the_last_two_blocked():
    (chat,) = sorted((FIXTURES / "gemini" / "tmp").glob("*/chats/session-*.jsonl"))
    lines = jsonl(chat)
    assert "sessionId" in lines[0] and lines[0]["kind"] == "main"
    latest = {r["id"]: r for r in lines if "id" in r}  # a record is re-written under its id as it grows
    statuses = [t["status"] for r in latest.values() if r.get("type") == "gemini" for t in r.get("toolCalls", [])]
    assert statuses == ["success", "success", "error", "error"]
