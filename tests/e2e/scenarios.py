"""Fake-model scripts for runs with a subagent: the parent spawns one, the child loops, the parent waits."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.waits import eventually

from .fakemodel import ModelRequest, Reply, Script, Text, ToolCall

CHILD_MARKER = "CBCHILD"  # only the child's prompt carries it, so a request is the child's if a user text does


def is_child(req: ModelRequest) -> bool:
    return any(CHILD_MARKER in u for u in req.user_texts)


def parent_child_script(
    *,
    spawn: ToolCall,
    parent_call: Callable[[int], ToolCall],
    child_call: Callable[[int], ToolCall],
    parent_calls: int,
    child_calls: int,
    child_ended: Callable[[], bool],
    wait: float = 60.0,
    settle: float = 0.5,
) -> Script:
    """Parent: spawn, `parent_calls` calls, then wait for `child_ended()`, one more call, a final text.

    The call after the wait matters in dsh: the "subagent finished" notice reaches the parent at its
    next step, and headless dsh exits as soon as the parent's turn ends.
    Child: `child_calls` calls, then a final text.
    """

    def script(req: ModelRequest) -> Reply:
        k = req.prior_calls
        if is_child(req):
            return child_call(k + 1) if k < child_calls else Text("child done")
        if k == 0:
            return spawn
        if k <= parent_calls:
            return parent_call(k)
        if k == parent_calls + 1:
            eventually(child_ended, timeout=wait, what="the child's turn to end")
            # The hook saw the child end; the harness's own closing of its turn (what makes the notice reach the
            # parent) shows nowhere a test can read: a grace period, kept.
            time.sleep(settle)
            return parent_call(k)
        return Text("parent done")

    return script


def dsh_bash(label: str, command: str = "echo cbprobe4") -> Callable[[int], ToolCall]:
    return lambda step: ToolCall("bash", {"command": command, "description": f"Run {label} step {step}"})


def claude_bash(label: str, command: str = "echo cbprobe4") -> Callable[[int], ToolCall]:
    return lambda step: ToolCall("Bash", {"command": command, "description": f"Run {label} step {step}"})


DSH_SPAWN = ToolCall(
    "subagent",
    {
        "description": "probe child",
        "prompt": f"{CHILD_MARKER}: run `echo cbprobe4` ten times.",
        "run_in_background": True,
    },
)
CLAUDE_SPAWN = ToolCall(
    "Agent",
    {
        "description": "probe child",
        "prompt": f"{CHILD_MARKER}: run `echo cbprobe4` ten times.",
        "subagent_type": "general-purpose",
    },
)  # background by default
