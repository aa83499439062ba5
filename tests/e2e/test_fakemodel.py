"""The fake model answers each dialect in the shapes the real harnesses accepted (no harness needed)."""

from __future__ import annotations

import gzip
import json
import urllib.request

from .fakemodel import FakeModel, Text, ToolCall, loop_script, sequence_script


def post(fm: FakeModel, path: str, body: dict, headers: dict | None = None) -> tuple[str, str]:
    data = json.dumps(body).encode()
    if headers and headers.get("Content-Encoding") == "gzip":
        data = gzip.compress(data)
    req = urllib.request.Request(
        fm.url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def sse_data(text: str) -> list:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


CHAT_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]


def test_chat_dialect_streams_a_tool_call_then_counts_steps_from_the_history():
    with FakeModel(loop_script(2)) as fm:
        kind, text = post(fm, "/chat/completions", {"stream": True, "tools": CHAT_TOOLS, "messages": [
            {"role": "user", "content": "go"}]})  # fmt: skip
        assert kind == "text/event-stream" and text.rstrip().endswith("data: [DONE]")
        chunks = sse_data(text)
        head = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
        args = chunks[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
        assert head["function"]["name"] == "bash" and json.loads(args)["description"] == "Run probe step 1"
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
        history = [{"role": "user", "content": "go"},
                   {"role": "assistant", "tool_calls": [{"id": head["id"], "function": {"name": "bash"}}]},
                   {"role": "tool", "tool_call_id": head["id"], "content": "DENIED-BY-TEST"}]  # fmt: skip
        _, text2 = post(fm, "/chat/completions", {"stream": True, "tools": CHAT_TOOLS, "messages": history})
        head2 = sse_data(text2)[1]["choices"][0]["delta"]["tool_calls"][0]
        assert head2["id"] != head["id"]  # unique per call
        assert fm.requests[1].prior_calls == 1 and fm.requests[1].tool_results == ["DENIED-BY-TEST"]
        assert fm.containing("DENIED-BY-TEST") == [fm.requests[1]]


def test_requests_without_tools_get_a_text_and_do_not_consume_the_script():
    with FakeModel(loop_script(1), side_text="A title") as fm:
        _, text = post(fm, "/chat/completions", {"stream": True, "messages": [{"role": "user", "content": "t"}]})
        assert sse_data(text)[1]["choices"][0]["delta"]["content"] == "A title"
        assert fm.agentic() == []


def test_anthropic_dialect_streams_tool_use_blocks_and_a_parallel_batch():
    script = sequence_script([[ToolCall("Bash", {"command": "a"}), ToolCall("Bash", {"command": "b"})]])
    with FakeModel(script) as fm:
        _, text = post(fm, "/v1/messages?beta=true", {"stream": True, "tools": [{"name": "Bash"}],
                                                      "messages": [{"role": "user", "content": "go"}]})  # fmt: skip
        events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
        assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
        data = sse_data(text)
        starts = [d["content_block"] for d in data if d["type"] == "content_block_start"]
        assert [s["name"] for s in starts] == ["Bash", "Bash"] and starts[0]["id"] != starts[1]["id"]
        deltas = [json.loads(d["delta"]["partial_json"]) for d in data if d["type"] == "content_block_delta"]
        assert deltas == [{"command": "a"}, {"command": "b"}]
        assert next(d for d in data if d["type"] == "message_delta")["delta"]["stop_reason"] == "tool_use"
        assert fm.requests[0].query == {"beta": ["true"]}


def test_responses_dialect_emits_a_function_call_item_and_reads_gzip_bodies():
    with FakeModel(loop_script(1)) as fm:
        _, text = post(fm, "/v1/responses", {"stream": True, "tools": [{"type": "function", "name": "exec_command"}],
                                             "input": [{"type": "message", "role": "user", "content": "go"}]},
                       headers={"Content-Encoding": "gzip"})  # fmt: skip
        data = sse_data(text)
        assert [d["type"] for d in data] == ["response.created", "response.output_item.added",
                                             "response.output_item.done", "response.completed"]  # fmt: skip
        item = data[2]["item"]
        assert item["type"] == "function_call" and item["name"] == "exec_command"
        assert json.loads(item["arguments"]) == {"cmd": "echo cbprobe4"}
        assert data[3]["response"]["usage"]["total_tokens"] > 0
        assert fm.requests[0].last_user == "go"


def test_gemini_dialect_answers_the_router_and_streams_a_function_call():
    with FakeModel(sequence_script([ToolCall("run_shell_command", {"command": "x"})], then="bye")) as fm:
        router = {"contents": [{"role": "user", "parts": [{"text": "go"}]}], "generationConfig": {
            "responseJsonSchema": {"properties": {"complexity_reasoning": {}, "complexity_score": {}}}}}  # fmt: skip
        _, text = post(fm, "/v1beta/models/m-lite:generateContent", router)
        answer = json.loads(json.loads(text)["candidates"][0]["content"]["parts"][0]["text"])
        assert set(answer) == {"complexity_reasoning", "complexity_score"}
        body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}],
                "tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}]}  # fmt: skip
        _, text = post(fm, "/v1beta/models/m:streamGenerateContent?alt=sse", body)
        (chunk,) = sse_data(text)
        call = chunk["candidates"][0]["content"]["parts"][0]["functionCall"]
        assert call["name"] == "run_shell_command" and call["args"] == {"command": "x"}
        denied = {"functionResponse": {"name": "run_shell_command", "response": {"error": "NO"}}}
        body["contents"] += [{"role": "model", "parts": [{"functionCall": call}]}, {"role": "user", "parts": [denied]}]
        _, text = post(fm, "/v1beta/models/m:streamGenerateContent?alt=sse", body)
        assert sse_data(text)[0]["candidates"][0]["content"]["parts"] == [{"text": "bye"}]
        assert fm.requests[-1].tool_results == ["NO"] and fm.requests[-1].reply == Text("bye")
