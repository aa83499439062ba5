"""What the state store has not seen yet, and putting back what it kept: the session's side of the state file."""

from __future__ import annotations

from collections.abc import Iterable

from breaker.channel import AgentMeta
from breaker.engine import AgentState, Guard

__all__ = ["Persistence", "Unsaved"]

Unsaved = tuple[str, AgentState | None, str, str | None]  # agent, its state (None: gone), harness, parent


class Persistence:
    """`agents`: those whose state changed (or went away) since the last save (the session adds to the set,
    the keeper takes from it); `guard_changed`: interrupts, pause, overrides or the counters changed."""

    def __init__(self, guard: Guard, meta: dict[str, AgentMeta]) -> None:
        self.guard = guard
        self.meta = meta
        self.agents: set[str] = set()
        self.guard_changed = True

    def take(self, budget: int) -> tuple[list[Unsaved], bool]:
        """Up to `budget` agents whose state changed since the last save: (agent, its state or None
        when it is gone, harness, parent). The second value: more are waiting."""
        out: list[Unsaved] = []
        unsaved = self.agents
        guard, meta = self.guard, self.meta
        while unsaved and len(out) < budget:
            agent = unsaved.pop()
            m = meta.get(agent)
            out.append((agent, guard.export_agent(agent), m.harness if m else "", m.parent if m else None))
        return out, bool(unsaved)

    def restore(
        self,
        states: Iterable[tuple[AgentState, str, str | None]],
        interrupts: Iterable[tuple[str, str, int, str, str | None]],
        *,
        paused: bool,
        checks: int,
        denies: dict[str, int],
        warnings: int = 0,
        windows: bool = True,
        overrides: dict[str, dict[str, int]] | None = None,
    ) -> None:
        """Put back what the state store kept (at start, before any connection)."""
        guard = self.guard
        for agent, limits in (overrides or {}).items():
            guard.restore_override(agent, limits)
        for state, harness, parent in states:
            guard.restore_agent(state, windows=windows)
            if not state.retired:
                self.meta[state.agent] = AgentMeta(harness, parent)
        for agent, reason, denies_so_far, harness, parent in interrupts:
            guard.restore_interrupt(agent, reason, denies_so_far)
            if agent not in self.meta:
                self.meta[agent] = AgentMeta(harness, parent)
        for agent in [a for a in self.meta if not guard.known(a)]:
            del self.meta[agent]
        if paused:
            guard.pause()
        guard.checks = checks
        guard.warnings = warnings
        for kind, n in denies.items():
            if kind in guard.denies and type(n) is int:
                guard.denies[kind] = n
        self.agents.clear()
        self.guard_changed = False
