"""The console's view of the guard, as plain Python state: state frames in, rows out. No Textual here.

Frames arrive at ~10 Hz; the screen reads this state at its own pace. Counting happens in dicts
and bounded deques, never as widget calls per event.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RATE_SLOTS = 12  # sparkline history: one slot per RATE_PERIOD seconds
RATE_PERIOD = 1.0
MAX_TRIPS = 1000
_STATUS_RANK = {"duplicate": 0, "capped": 1, "interrupted": 2, "ok": 3}


@dataclass
class Agent:
    """One agent as the console knows it (the server's agent frame plus console-side history)."""

    id: str
    data: dict[str, Any]
    rate: deque[int] = field(default_factory=lambda: deque([0] * RATE_SLOTS, maxlen=RATE_SLOTS))
    sampled_calls: int = 0

    @property
    def danger(self) -> tuple[int, float, float, int, str]:
        """Sort key, most dangerous first: a live loop, then capped, interrupted; then closest to a limit."""
        d = self.data
        worst = d.get("worst_count", 0) / max(d.get("duplicate_limit", 1), 1)
        cap = d.get("cap", 0)
        cap_use = d.get("calls", 0) / cap if cap else 0.0
        return (_STATUS_RANK.get(d.get("status", "ok"), 3), -worst, -cap_use, -sum(self.rate), self.id)


class ConsoleState:
    """Everything the screen shows, updated from the guard's state frames."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.agents: dict[str, Agent] = {}
        self.top_keys: list[dict[str, Any]] = []
        self.trips: deque[dict[str, Any]] = deque(maxlen=MAX_TRIPS)
        self.trips_seen = 0
        self.new_trips = 0  # trips since the screen last took them (for the log)
        self.stats: dict[str, Any] = {}
        self.config: dict[str, Any] = {}
        self.checks_per_s = 0.0
        self.guard_status = "starting"  # starting, running, restarting, attached, unreachable, stopped
        self.guard_note = ""
        self.version = 0  # bumps on every change: the screen redraws only when it moved
        self.frames = 0
        self.marked: set[str] = set()
        self.filter = ""
        self._sample_at = 0.0
        self._sample_checks: int | None = None

    # -- input ----------------------------------------------------------------------------------

    def apply(self, frame: dict[str, Any]) -> None:
        """Take one state frame (full or delta) from the guard."""
        self.frames += 1
        if frame.get("full"):
            keep = {a["agent"] for a in frame.get("agents", ())}
            for gone in [a for a in self.agents if a not in keep]:
                self._drop(gone)
        for data in frame.get("agents", ()):
            agent = self.agents.get(data["agent"])
            if agent is None:
                agent = self.agents[data["agent"]] = Agent(data["agent"], data, sampled_calls=data.get("calls", 0))
            else:
                agent.data = data
        for gone in frame.get("gone", ()):
            self._drop(gone)
        if "top_keys" in frame:
            self.top_keys = list(frame["top_keys"])
        for trip in frame.get("trips", ()):
            self.trips.append(trip)
            self.trips_seen += 1
            self.new_trips += 1
        if frame.get("stats"):
            self.stats = frame["stats"]
        if frame.get("config"):
            self.config = frame["config"]
        self.sample()
        self.version += 1

    def _drop(self, agent: str) -> None:
        self.agents.pop(agent, None)
        self.marked.discard(agent)

    def sample(self) -> None:
        """Close a rate period if one has passed: calls per agent and checks per second."""
        now = self.clock()
        if now - self._sample_at < RATE_PERIOD:
            return
        elapsed = now - self._sample_at if self._sample_at else RATE_PERIOD
        self._sample_at = now
        for agent in self.agents.values():
            calls = agent.data.get("calls", 0)
            agent.rate.append(max(0, calls - agent.sampled_calls))
            agent.sampled_calls = calls
        checks = self.stats.get("checks")
        if checks is not None:
            if self._sample_checks is not None:
                self.checks_per_s = max(0, checks - self._sample_checks) / max(elapsed, 1e-6)
            self._sample_checks = checks

    def set_guard_status(self, status: str, note: str = "") -> None:
        if (status, note) != (self.guard_status, self.guard_note):
            self.guard_status, self.guard_note = status, note
            self.version += 1

    # -- output ---------------------------------------------------------------------------------

    def visible_agents(self) -> list[Agent]:
        """Agents passing the filter, most dangerous first."""
        needle = self.filter.casefold()
        agents = self.agents.values()
        if needle:
            agents = [
                a
                for a in agents
                if needle in a.id.casefold()
                or needle in str(a.data.get("harness") or "").casefold()
                or needle in str(a.data.get("last_tool") or "").casefold()
                or needle in str(a.data.get("worst_tool") or "").casefold()
                or needle in str(a.data.get("parent") or "").casefold()
            ]
        return sorted(agents, key=lambda a: a.danger)

    def take_new_trips(self) -> list[dict[str, Any]]:
        n, self.new_trips = self.new_trips, 0
        if n <= 0:
            return []
        return list(self.trips)[-min(n, len(self.trips)) :]

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.config.get("values") or {})

    def toggle_mark(self, agent: str) -> bool:
        if agent in self.marked:
            self.marked.discard(agent)
            return False
        if agent in self.agents:
            self.marked.add(agent)
            return True
        return False
