"""A connection's protocol state on the guard's side (`Channel`), and the records every room of the session shares."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from breaker.protocol import HARNESS, TripRow
from breaker.vocab import Plane
from breaker.wire import FrameBuffer

__all__ = ["MAX_TRIPS_BEHIND", "WRITE_HIGH", "AgentMeta", "Channel", "Slot", "Subscription", "drop_meta"]

WRITE_HIGH = 256 * 1024  # a connection's unsent output past which it is "not reading" (the transport pauses it)
MAX_TRIPS_BEHIND = 500  # trips kept for a subscriber that is behind; older ones are dropped


class Slot:
    """A reply's place in its connection's output, kept while a job works on it."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: bytes | None = None


class Channel:
    """One connection's protocol state."""

    __slots__ = (
        "agents",
        "backlog_high",
        "behind_since",
        "blocked",
        "buf",
        "checked",
        "close_reason",
        "closing",
        "eof",
        "follow_base",
        "follow_seq",
        "following",
        "harness",
        "out",
        "peer_pid",
        "plane",
        "pooled",
        "role",
        "sub",
        "urgent",
    )

    def __init__(self, plane: Plane, peer_pid: int | None, max_frame: int) -> None:
        self.plane = plane
        self.peer_pid = peer_pid
        self.buf = FrameBuffer(max_frame)
        self.out: deque[bytes | Slot] = deque()  # replies in request order; a Slot waits for its job
        self.urgent: list[bytes] = []  # events: not tied to a request, sent at once
        self.harness = ""
        self.role = ""
        self.checked = False
        self.agents: set[str] = set()  # agents this connection checked for: interrupt pushes go here
        self.sub: Subscription | None = None
        self.behind_since: float | None = None
        self.backlog_high = False  # the transport says: its unsent output is over WRITE_HIGH
        self.blocked: Slot | None = None  # a config_set in progress: later requests wait to see its effect
        self.pooled = 0  # bytes of this connection's buffer counted against the shared POOL
        self.eof = False
        self.closing = False  # no more input is read; close once the output is out
        self.close_reason = ""
        self.following: str | None = None  # the agent whose calls this connection follows
        self.follow_seq = 0  # the number of the last of its calls sent here (-1: send its keys again)
        self.follow_base = 0  # the number of the agent's last call when this connection began to follow it

    def take_output(self) -> bytes:
        """Everything that may be written now: events, then replies up to the first one still waiting."""
        parts = self.urgent
        self.urgent = []
        out = self.out
        while out:
            head = out[0]
            if isinstance(head, Slot):
                if head.data is None:
                    break
                head = head.data
            parts.append(head)
            out.popleft()
        return b"".join(parts)

    @property
    def done(self) -> bool:
        """Closing, and nothing left to send or wait for: the transport may close it."""
        return self.closing and not self.out and not self.urgent

    @property
    def is_harness(self) -> bool:
        """Counted among the connected harnesses: said hello as one, or asked for a check."""
        return self.plane == HARNESS and self.role != "console" and (bool(self.harness) or self.checked)


@dataclass(slots=True)
class Subscription:
    """What a subscriber has not been sent yet."""

    fill: deque[str] = field(default_factory=deque)  # the full picture still to send (ids, in order)
    agents: set[str] = field(default_factory=set)  # agents that changed since they were last sent
    gone: set[str] = field(default_factory=set)
    trips: deque[TripRow] = field(default_factory=lambda: deque(maxlen=MAX_TRIPS_BEHIND))
    config: bool = True
    full: bool = True  # the next frame starts a full picture
    header: bool = True  # the next frame carries the header (gone, top keys, trips, stats, config)


@dataclass(slots=True)
class AgentMeta:
    """What the harness told the guard about an agent, the connections that checked for it, and its recent calls.

    `recent` is a ring of its last `breaker.follows.RECENT` calls, kept for every agent (a console that opens it
    sees them at once): the check puts in what it already holds (clock, request, verdict, judged args), the next
    tick keeps a call of a few short args without the request and the verdict and makes a call row of any other
    (`Follows.settle`), and a console's follow makes rows of the rest (`Follows.recent`): no preview is built on
    the check's path. `made` counts the calls put in (the ring's next place is `made % RECENT`); `settled`, how
    many of them the tick has looked at."""

    harness: str
    parent: str | None
    channels: set[Channel] = field(default_factory=set)
    recent: list[Any] = field(default_factory=list)
    made: int = 0
    settled: int = 0


def drop_meta(meta: dict[str, AgentMeta], agent: str) -> None:
    """Forget what the harness told about `agent`, and which connections checked for it."""
    gone = meta.pop(agent, None)
    if gone is not None:
        for ch in gone.channels:
            ch.agents.discard(agent)
