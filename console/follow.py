"""What the drill-down shows of the agent it follows: its recent calls from before it was opened, then its calls
as they happen (the last TAIL), the repeated keys of its window, and how many calls the console missed. Fed by the
guard's `calls` events."""

from __future__ import annotations

from collections import deque

from breaker.protocol import CallRow, CallsEvent, KeyRow

__all__ = ["TAIL", "FollowState"]

TAIL = 200  # calls kept on screen: the guard's own history for a followed agent


class FollowState:
    """One followed agent's calls and window. `version` moves whenever something shown changed."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.calls: deque[CallRow] = deque(maxlen=TAIL)
        self.received = 0  # calls received since the follow began: the number of the newest one
        self.earlier = 0  # of those, the calls it made before the follow began (the guard's recent calls of it)
        self.keys: list[KeyRow] = []
        self.distinct = 0
        self.missed = 0  # calls the guard had no room to keep while the console was behind
        self.events = 0
        self.version = 0

    def apply(self, event: CallsEvent) -> None:
        if event.agent != self.agent:
            return
        self.calls.extend(event.calls)
        self.received += len(event.calls)
        self.earlier += min(event.earlier, len(event.calls))
        self.keys = event.keys
        self.distinct = event.distinct
        self.missed += event.dropped
        self.events += 1
        self.version += 1

    @property
    def since(self) -> int:
        """Calls it made since the follow began."""
        return self.received - self.earlier

    @property
    def first(self) -> int:
        """The number of the oldest call kept (calls are numbered from 1 as they arrive)."""
        return self.received - len(self.calls) + 1
