"""What the session asks the transport to do: each job is a piece of I/O (a file, a process, a thread)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from breaker.channel import Channel, Slot
from breaker.vocab import Outcome

__all__ = ["CommandJob", "ConfigJob", "DecisionJob", "DurableJob", "IncidentJob", "Job", "JudgeJob"]


@dataclass(slots=True)
class ConfigJob:
    """Write `changes` into the patch layer and apply them; then `complete(channel, slot, reply)`."""

    channel: Channel
    slot: Slot
    rid: Any
    changes: dict[str, Any]


@dataclass(slots=True)
class DurableJob:
    """An operator's change: save the guard's state, then release `data` (the reply already built)."""

    channel: Channel
    slot: Slot
    data: bytes


@dataclass(slots=True)
class CommandJob:
    """Run the operator's `interruptCommand` for an agent."""

    argv: list[str]
    agent: str
    reason: str = ""


@dataclass(slots=True)
class IncidentJob:
    """Append one incident line (an agent's first deny of a kind)."""

    kind: str
    tool: str
    count: int
    limit: int
    agent: str
    when: float


@dataclass(slots=True)
class JudgeJob:
    """Have the judge process read a large frame (breaker/judge.py); then `judged(channel, slot, len, answer)`.
    The connection's later requests wait for it, as for a config write."""

    channel: Channel
    slot: Slot
    frame: bytes
    ignore: tuple[str, ...]


@dataclass(slots=True)
class DecisionJob:
    """A deny or a warning, for the OpenTelemetry export (asked for only while it is on)."""

    decision: Outcome  # "deny" or "warn"
    rule: str  # the deny's kind, or the rule that warned
    agent: str
    tool: str
    call_id: str | int | None
    harness: str
    parent: str | None
    conversation: str  # the top of the agent's parent chain, as the guard knows it (the agent itself if none)
    count: int
    limit: int
    text: str  # what the model is told: the deny reason or the warning
    first: bool  # a deny that is the agent's first of its kind (a trip)
    when: float


Job = ConfigJob | DurableJob | CommandJob | IncidentJob | DecisionJob | JudgeJob
