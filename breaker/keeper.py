"""The guard's state across restarts, on the event loop's side: restore it at start, save what changed.

What changed is saved every SAVE_EVERY seconds, and at once when an operator's change waits for it:
every change that waited is answered by the first save that started after it. Agents are exported a
slice at a time (the loop answers checks in between); the state file's own thread encodes and writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from breaker.jobs import DurableJob
from breaker.protocol import TripRow
from breaker.session import ServerSession
from breaker.store import GuardRecord, StateStore

__all__ = ["SAVE_EVERY", "StateKeeper"]

log = logging.getLogger("cbconsole.guard")

SAVE_EVERY = 0.2  # seconds between saves of what changed: what a crash can lose
SAVE_SLICE = 200  # agents exported per slice of a save, between which the event loop runs
COUNTERS_EVERY = 2.0  # seconds between saves of the counters alone (checks, denies)


class StateKeeper:
    """Ties a session to its state store. `answered(jobs)` is called once the jobs' change is saved."""

    def __init__(self, session: ServerSession, store: StateStore, answered: Callable[[list[DurableJob]], Any]) -> None:
        self.session = session
        self.store = store
        self.answered = answered
        self._wanted = asyncio.Event()
        self._waiting: list[DurableJob] = []
        self._saved_checks = -1
        self._saved_guard_at = 0.0
        self._error: str | None = None  # the last problem with the state: the stats show it until another one

    @property
    def state_file(self) -> str:
        """Where the guard keeps its state (for the stats)."""
        return str(self.store.path)

    @property
    def state_error(self) -> str | None:
        """The state file's problem now, or the last one there was (for the stats and the metrics)."""
        if self.store.error:
            self._error = self.store.error
        return self._error

    def failed(self, message: str) -> None:
        """The state file's writer reports a problem (from its thread)."""
        self._error = message

    def restore(self) -> None:
        """Open the state file and put back what it holds (before any connection)."""
        store, session = self.store, self.session
        loaded = store.open()
        for note in loaded.notes:
            log.warning("state: %s", note)
        if loaded.problem is not None:
            self._error = next((n for n in loaded.notes if loaded.problem in n), loaded.problem)
        if loaded.agents or loaded.guard is not None:
            record = loaded.guard or GuardRecord()
            session.persist.restore(
                ((r.state, r.harness, r.parent) for r in loaded.agents),
                record.interrupts,
                paused=record.paused,
                checks=record.checks,
                denies=record.denies,
                warnings=record.warnings,
                windows=loaded.windows,
                overrides=record.overrides,
            )
            session.frames.recent_trips.extend(
                TripRow(time=t, agent=a, kind=k, tool=tool, count=n, limit=limit)
                for t, a, k, tool, n, limit in record.trips
            )
            log.info(
                "state restored from %s: %d agent(s), %d interrupt(s)%s",
                store.path,
                len(loaded.agents),
                len(record.interrupts),
                ", guard paused" if record.paused else "",
            )
        self._saved_checks = session.guard.checks

    def wait_for_save(self, job: DurableJob) -> None:
        """Answer `job` after the next save (which starts now)."""
        self._waiting.append(job)
        self._wanted.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), SAVE_EVERY)
            self._wanted.clear()
            waiting, self._waiting = self._waiting, []
            try:
                await self.save()
            except Exception:
                log.exception("saving the guard's state failed")
            finally:
                if waiting:
                    self.answered(waiting)

    async def save(self, *, everything: bool = False) -> None:
        """Hand what changed to the state file's thread, a slice at a time; returns once it is on disk."""
        store, session = self.store, self.session
        if not store.running:
            return
        items: list[Any] = []
        while True:
            batch, more = session.persist.take(SAVE_SLICE)
            items.extend(batch)
            if not more:
                break
            await asyncio.sleep(0)  # exporting thousands of agents: checks are answered in between
        guard = session.guard
        now = time.monotonic()
        counters_due = guard.checks != self._saved_checks and now - self._saved_guard_at > COUNTERS_EVERY
        if session.persist.guard_changed or counters_due or everything:
            session.persist.guard_changed = False
            self._saved_checks, self._saved_guard_at = guard.checks, now
            items.append(self._guard_record())
        if not items:
            return
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        store.save(items, lambda: loop.call_soon_threadsafe(settle))
        await done

    def _guard_record(self) -> GuardRecord:
        guard, meta = self.session.guard, self.session.meta
        interrupts = []
        for agent, reason, denies in guard.interrupts():
            m = meta.get(agent)
            interrupts.append((agent, reason, denies, m.harness if m else "", m.parent if m else None))
        trips = [(t.time, t.agent, t.kind, t.tool, t.count, t.limit) for t in self.session.frames.recent_trips]
        return GuardRecord(
            guard.paused, guard.checks, dict(guard.denies), interrupts, guard.warnings, guard.overrides(), trips
        )
