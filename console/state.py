"""The console's view of the guard, as plain Python state: state frames in, rows out. No Textual here.

Frames arrive at ~10 Hz; the screen reads this state at its own pace. Counting happens in dicts
and bounded deques, never as widget calls per event.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from breaker.config import KEYS, Config, ConfigError
from breaker.protocol import AgentRow, ConfigFrame, GuardStats, KeyRow, StateFrame, TripRow

RATE_SLOTS = 12  # sparkline history: one slot per RATE_PERIOD seconds
RATE_PERIOD = 1.0
MAX_TRIPS = 1000
# Most dangerous first: a loop caught (any rule, and a deny kind this console does not know: a newer
# guard's), a budget spent, the operator's stop, a warning; then ok.
_STATUS_RANK = {"duplicate": 0, "repeat": 0, "cycle": 0, "stall": 0, "cap": 1, "interrupted": 2, "warned": 3, "ok": 4}


@dataclass
class Agent:
    """One agent as the console knows it: the guard's row plus console-side history.

    `version` bumps whenever a new row arrives: the table's change token (a frame may carry an equal
    row again; comparing the token is cheap and cannot be fooled by a reused object id)."""

    id: str
    data: AgentRow
    rate: deque[int] = field(default_factory=lambda: deque([0] * RATE_SLOTS, maxlen=RATE_SLOTS))
    sampled_calls: int = 0
    version: int = 0

    @property
    def danger(self) -> tuple[int, float, float, int, str]:
        """Sort key, most dangerous first: status duplicate, repeat or cycle, then cap, interrupted, warned;
        then closest to a limit."""
        d = self.data
        worst = d.worst_count / max(d.duplicate_limit, 1)
        cap_use = d.calls / d.cap if d.cap else 0.0
        return (_STATUS_RANK.get(d.status, 0), -worst, -cap_use, -sum(self.rate), self.id)


class ConsoleState:
    """Everything the screen shows, updated from the guard's state frames."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.agents: dict[str, Agent] = {}
        self.top_keys: list[KeyRow] = []
        self.trips: deque[TripRow] = deque(maxlen=MAX_TRIPS)
        self.trips_seen = 0
        self.new_trips = 0  # trips since the screen last took them (for the log)
        self.stats: GuardStats | None = None  # None until the guard's first frame
        self.config = ConfigFrame(values={})  # the config in force, as the guard sent it
        self.settings: Config | None = None  # its values, decoded; None until the guard sent them
        self.settings_error = ""  # why the guard's values do not decode here (a guard of another version)
        self.checks_per_s = 0.0
        self.guard_status = "starting"  # starting, running, restarting, attached, unreachable, stopped
        self.guard_note = ""
        self.version = 0  # see changed()
        self.frames = 0
        self.marked: set[str] = set()
        self.filter = ""
        self._full: set[str] | None = None  # agents of a full picture that is still arriving in parts
        self._sample_at = 0.0
        self._sample_checks: int | None = None

    # -- input ----------------------------------------------------------------------------------

    def apply(self, frame: StateFrame) -> None:
        """Take one state frame (a full picture's part, or the changes since the last one)."""
        self.frames += 1
        if frame.full:
            self._full = set()
        for row in frame.agents:
            agent = self.agents.get(row.agent)
            if agent is None:
                agent = self.agents[row.agent] = Agent(row.agent, row, sampled_calls=row.calls)
            else:
                agent.data = row
                agent.version += 1
            if self._full is not None:
                self._full.add(row.agent)
        if self._full is not None and frame.last:
            for gone in [a for a in self.agents if a not in self._full]:
                self._drop(gone)  # the full picture is complete: whoever is not in it is gone
            self._full = None
        for gone in frame.gone:
            self._drop(gone)
        if frame.top_keys is not None:
            self.top_keys = list(frame.top_keys)
        for trip in frame.trips:
            self.trips.append(trip)
            self.trips_seen += 1
            self.new_trips += 1
        if frame.stats is not None:
            self.stats = frame.stats
        if frame.config is not None:
            self.set_config(frame.config)
        self.sample()
        self.changed()

    def changed(self) -> None:
        """Something the screen shows moved: the screen redraws at its next tick only if this was called.
        Every method of this class that changes what is shown calls it; nothing else bumps `version`."""
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
            calls = agent.data.calls
            agent.rate.append(max(0, calls - agent.sampled_calls))
            agent.sampled_calls = calls
        if self.stats is not None:
            checks = self.stats.checks
            if self._sample_checks is not None:
                self.checks_per_s = max(0, checks - self._sample_checks) / max(elapsed, 1e-6)
            self._sample_checks = checks

    def set_guard_status(self, status: str, note: str = "") -> None:
        if (status, note) != (self.guard_status, self.guard_note):
            self.guard_status, self.guard_note = status, note
            self.changed()

    def set_config(self, config: ConfigFrame) -> None:
        """The config in force (from a state frame, or the reply to an edit), its values decoded once."""
        self.config = config
        self.settings, self.settings_error = None, ""
        if config.values:
            try:
                # A key this console does not know is a newer guard's: left out, the rest still shown.
                self.settings = Config.from_mapping({k: v for k, v in config.values.items() if k in KEYS})
            except ConfigError as exc:
                self.settings_error = str(exc)
        self.changed()

    def set_paused(self, paused: bool) -> None:
        """The guard said it is paused (or not), before its next frame does."""
        if self.stats is not None:
            self.stats.paused = paused
        self.changed()

    def set_filter(self, text: str) -> None:
        if text != self.filter:
            self.filter = text
            self.changed()

    # -- output ---------------------------------------------------------------------------------

    def visible_agents(self) -> list[Agent]:
        """Agents passing the filter, most dangerous first."""
        needle = self.filter.casefold()
        agents: Iterable[Agent] = self.agents.values()
        if needle:
            agents = [
                a
                for a in agents
                if needle in a.id.casefold()
                or needle in a.data.harness.casefold()
                or needle in a.data.last_tool.casefold()
                or needle in a.data.worst_tool.casefold()
                or needle in (a.data.parent or "").casefold()
            ]
        return sorted(agents, key=lambda a: a.danger)

    def take_new_trips(self) -> list[TripRow]:
        n, self.new_trips = self.new_trips, 0
        if n <= 0:
            return []
        return list(self.trips)[-min(n, len(self.trips)) :]

    @property
    def values(self) -> dict[str, Any]:
        """The config in force as the patch layer spells it (camelCase keys, every one): what the config form
        edits. Built from the decoded settings; empty until the guard sent values this console can read."""
        return self.settings.to_mapping() if self.settings is not None else {}

    @property
    def exempt(self) -> tuple[str, ...]:
        return self.settings.exempt if self.settings is not None else ()

    @property
    def paused(self) -> bool:
        return self.stats is not None and self.stats.paused

    @property
    def harnesses(self) -> dict[str, int]:
        return dict(self.stats.harnesses) if self.stats is not None else {}

    def toggle_mark(self, agent: str) -> bool:
        """Mark or unmark `agent`; whether it is marked now."""
        if agent in self.marked:
            self.marked.discard(agent)
        elif agent in self.agents:
            self.marked.add(agent)
        self.changed()
        return agent in self.marked

    def clear_marks(self) -> None:
        if self.marked:
            self.marked.clear()
            self.changed()
