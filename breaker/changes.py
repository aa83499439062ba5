"""The operator's changes to the guard: each answered once the state store has it, or the patch layer."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from breaker.channel import AgentMeta, Channel, Slot, drop_meta
from breaker.config import BY_KEY, PATCH_ONLY_KEYS, ConfigError
from breaker.engine import Guard
from breaker.frames import Subscribers
from breaker.jobs import CommandJob, ConfigJob, DurableJob, Job
from breaker.persist import Persistence
from breaker.protocol import (
    ConfigSet,
    Done,
    ErrorReply,
    Interrupt,
    InterruptEvent,
    Override,
    Pause,
    Reset,
    Resume,
    Uninterrupt,
)
from breaker.stats import StatsBoard

__all__ = ["FORBIDDEN_KEYS", "OperatorChanges"]

log = logging.getLogger("cbconsole.guard")

FORBIDDEN_KEYS = PATCH_ONLY_KEYS  # their effect reaches outside the guard: only the patch file the user edits sets them


class OperatorChanges:
    """The ops that change the guard: interrupt, uninterrupt, reset, override, pause, resume, config_set.
    Each marks what subscribers and the state store must see, and answers with a Slot a job fills: a
    DurableJob once the change is saved, a ConfigJob once it is written. `fill_command` builds the
    operator's interrupt command for an agent (None: none)."""

    def __init__(
        self,
        guard: Guard,
        *,
        meta: dict[str, AgentMeta],
        jobs: deque[Job],
        woken: set[Channel],
        frames: Subscribers,
        persist: Persistence,
        stats: StatsBoard,
        fill_command: Callable[[str, str], list[str] | None] | None,
    ) -> None:
        self.guard = guard
        self.meta = meta
        self.jobs = jobs
        self.woken = woken
        self.frames = frames
        self.changed = frames.changed
        self.persist = persist
        self.stats = stats
        self.fill_command = fill_command

    def durable(self, ch: Channel, data: bytes) -> Slot:
        """An operator's change is acknowledged once the state store has it (or at once, without one)."""
        slot = Slot()
        self.jobs.append(DurableJob(ch, slot, data))
        return slot

    def interrupt(self, ch: Channel, req: Interrupt) -> Slot:
        agent, reason = req.agent, req.reason
        self.guard.interrupt(agent, reason)
        self.changed.add(agent)
        self.persist.guard_changed = True
        event = InterruptEvent(agent, reason).encode()
        meta = self.meta.get(agent)
        told = 0
        for target in list(meta.channels) if meta is not None else ():
            if target.backlog_high or target.closing:
                self.stats.events_dropped += 1  # it reads nothing; its next check is denied anyway
                continue
            target.urgent.append(event)
            self.woken.add(target)
            told += 1
        log.info("interrupt: agent %r (%s); told %d connection(s)", agent, reason or "no reason given", told)
        if self.fill_command is not None:
            argv = self.fill_command(agent, reason)
            if argv is not None:
                self.jobs.append(CommandJob(argv, agent, reason))
        return self.durable(ch, Done(notified=told).encode(req.id))

    def uninterrupt(self, ch: Channel, req: Uninterrupt) -> Slot:
        known = self.guard.uninterrupt(req.agent)
        self.changed.add(req.agent)
        self.persist.guard_changed = True
        if req.agent not in self.guard:
            self.frames.gone.add(req.agent)
            drop_meta(self.meta, req.agent)
        return self.durable(ch, Done(known=known).encode(req.id))

    def reset(self, ch: Channel, req: Reset) -> Slot:
        known = self.guard.reset(req.agent)
        self.changed.add(req.agent)
        self.persist.agents.add(req.agent)
        self.persist.guard_changed = True  # its override, if any, is gone
        return self.durable(ch, Done(known=known).encode(req.id))

    def override(self, ch: Channel, req: Override) -> Slot:
        own = self.guard.override(req.agent, req.limits)
        if own is not None:
            self.changed.add(req.agent)
            self.persist.agents.add(req.agent)
            self.persist.guard_changed = True  # kept apart from the agent: in the guard's own record
            log.info("override: agent %r now has %s", req.agent, own or "the config's limits")
        return self.durable(ch, Done(known=own is not None, override=own).encode(req.id))

    def pause(self, ch: Channel, req: Pause) -> Slot:
        self.guard.pause()
        self.persist.guard_changed = True
        log.info("guard paused: every call is allowed and not recorded")
        return self.durable(ch, Done(paused=True).encode(req.id))

    def resume(self, ch: Channel, req: Resume) -> Slot:
        self.guard.resume()
        self.persist.guard_changed = True
        log.info("guard resumed")
        return self.durable(ch, Done(paused=False).encode(req.id))

    def config_set(self, ch: Channel, req: ConfigSet) -> bytes | Slot:
        forbidden = [k for k in FORBIDDEN_KEYS if k in req.changes]
        if forbidden:
            why = "; ".join(f"{k} {BY_KEY[k].patch_only}" for k in forbidden)
            return ErrorReply(
                "forbidden_key",
                f"{why}: set only in the patch file you edit, never over a socket",
            ).encode(req.id)
        try:  # every problem with the values themselves, at once (the job merges them with the file)
            self.guard.config.updated(req.changes)
        except ConfigError as exc:
            problems = [{"key": p.key, "expected": p.expected, "found": p.found} for p in exc.problems]
            return ErrorReply("bad_config", str(exc), problems).encode(req.id)
        slot = Slot()
        ch.blocked = slot
        self.jobs.append(ConfigJob(ch, slot, req.id, dict(req.changes)))
        return slot
