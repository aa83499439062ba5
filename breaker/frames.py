"""State frames for subscribers, and snapshots: what changed since the last tick, built a part at a time."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from breaker.channel import MAX_TRIPS_BEHIND, AgentMeta, Channel, Slot, Subscription
from breaker.engine import Guard
from breaker.follows import Follows
from breaker.protocol import (
    AgentRow,
    ConfigFrame,
    Done,
    GuardStats,
    Snapshot,
    SnapshotReply,
    StateFrame,
    Subscribe,
    TripRow,
    Unsubscribe,
    encode_frame,
)
from breaker.stats import StatsBoard

__all__ = ["DROP_AFTER", "RECENT_TRIPS", "ROWS_PER_PART", "Subscribers"]

log = logging.getLogger("cbconsole.guard")

DROP_AFTER = 10.0  # seconds a subscriber may stay behind before it is dropped
RECENT_TRIPS = MAX_TRIPS_BEHIND  # trips the guard keeps (and saves), sent to a console when it subscribes
ROWS_PER_PART = 25  # agent rows per state-frame part: one part takes a few hundred microseconds to build


@dataclass(slots=True)
class _SnapshotWork:
    channel: Channel
    slot: Slot
    rid: Any
    ids: deque[str]
    rows: list[AgentRow]
    top: int


class Subscribers:
    """The `subscribe`, `unsubscribe` and `snapshot` ops, and what the next tick has not handed on: agents
    that changed (`changed`: the session adds to it on each counted call), agents gone, trips, the config.
    `tick` hands that to every subscriber's backlog (and followed agents' calls to their followers);
    `pump` builds the frames a part at a time. The session lends it what it shares: the guard, the agents'
    meta, the connections, the woken set, and how to close a connection or complete a reply."""

    def __init__(
        self,
        guard: Guard,
        *,
        meta: dict[str, AgentMeta],
        channels: set[Channel],
        woken: set[Channel],
        follows: Follows,
        stats: StatsBoard,
        clock: Callable[[], float],
        close: Callable[[Channel], None],
        complete: Callable[[Channel, Slot, bytes], object],
        tick: float,
    ) -> None:
        self.guard = guard
        self.meta = meta
        self.channels = channels
        self.woken = woken
        self.follows = follows
        self.stats = stats
        self.clock = clock
        self.close = close
        self.complete = complete
        self.tick_interval = tick
        self.config_frame = ConfigFrame(values=guard.config.to_mapping())
        self.changed: set[str] = set()
        self.gone: set[str] = set()
        self.trips: list[TripRow] = []  # since the last tick
        self.recent_trips: deque[TripRow] = deque(maxlen=RECENT_TRIPS)  # the last RECENT_TRIPS, ticked or not
        self.config_changed = False
        self.seq = 0
        self.snapshots: deque[_SnapshotWork] = deque()
        self._stats_sent: tuple[Any, ...] = ()

    # -- ops ------------------------------------------------------------------------------------

    def subscribe(self, ch: Channel, req: Subscribe) -> bytes:
        # The first frames: the full picture, its first part with the recent trips (those the next tick hands
        # every subscriber are left to it).
        before = max(0, len(self.recent_trips) - len(self.trips))
        trips = deque(itertools.islice(self.recent_trips, before), maxlen=MAX_TRIPS_BEHIND)
        ch.sub = Subscription(fill=deque(self.known_ids()), trips=trips)
        ch.role = ch.role or "console"
        return Done(tick=self.tick_interval).encode(req.id)

    def unsubscribe(self, ch: Channel, req: Unsubscribe) -> bytes:
        ch.sub = None
        return Done().encode(req.id)

    def snapshot(self, ch: Channel, req: Snapshot) -> Slot:
        """Built a part at a time by `pump`, like a subscriber's full frame: a guard with thousands
        of agents answers without holding up anyone's check."""
        slot = Slot()
        ids = deque(self.known_ids())
        self.snapshots.append(_SnapshotWork(ch, slot, req.id, ids, [], req.top))
        return slot

    def trip(self, row: TripRow) -> None:
        """An agent tripped: the next tick hands it to every subscriber, and it is one of the recent trips."""
        self.trips.append(row)
        self.recent_trips.append(row)

    def set_config(self, frame: ConfigFrame) -> None:
        """The config in force and where it came from changed (the transport loaded the layers)."""
        self.config_frame = frame
        self.config_changed = True
        self.changed.update(self.guard.agents())  # windows, limits and statuses of every agent may change
        self.changed.update(self.guard.interrupted_agents())

    # -- rows -----------------------------------------------------------------------------------

    def known_ids(self) -> list[str]:
        """Every agent an operator sees: tracked ones, most recently active first, then interrupted ones."""
        guard = self.guard
        ids = guard.agents()
        ids.reverse()
        ids.extend(a for a in reversed(guard.interrupted_agents()) if a not in guard)
        return ids

    def row(self, row: AgentRow) -> AgentRow:
        """The engine's row of an agent (`Guard.agent_view`, a new one each time), with what the session knows."""
        meta = self.meta.get(row.agent)
        if meta is not None:
            row.harness, row.parent = meta.harness, meta.parent
        return row

    def current_stats(self) -> GuardStats:
        return self.stats.current(self.guard, self.channels, self.clock())

    # -- ticks and frames -----------------------------------------------------------------------

    def tick(self, now_monotonic: float) -> None:
        """A subscriber tick: hand what changed since the last one to every subscriber's backlog.
        The frames themselves are built by `pump`, a part at a time."""
        subscribers = [ch for ch in self.channels if ch.sub is not None and not ch.closing]
        changed = self.changed.copy()  # the session holds this set: emptied, never replaced
        self.changed.clear()
        gone = {a for a in self.gone if not self.guard.known(a)}
        self.gone = set()
        trips, self.trips = self.trips, []
        config = self.config_changed
        self.config_changed = False
        signature = self.stats.signature(self.guard, len(self.channels))
        stats_changed = signature != self._stats_sent
        self._stats_sent = signature
        self.seq += 1
        if self.follows.fresh:
            self.follows.settle()
        if self.follows.agents:
            self.follows.push(changed)
        for ch in subscribers:
            sub = ch.sub
            assert sub is not None
            if ch.backlog_high:
                if ch.behind_since is None:
                    ch.behind_since = now_monotonic
                elif now_monotonic - ch.behind_since > DROP_AFTER:
                    log.warning("dropped a subscriber (pid %s) that read nothing for %.0f s", ch.peer_pid, DROP_AFTER)
                    self.close(ch)
                    continue
            sub.agents |= changed
            sub.agents -= gone
            sub.gone |= gone
            sub.gone -= changed
            sub.trips.extend(trips)
            sub.config |= config
            if changed or gone or trips or config or stats_changed:
                sub.header = True

    def pump(self, budget: int = ROWS_PER_PART) -> bool:
        """Build and queue up to about `budget` agent rows of pending state frames and snapshots.
        True if more work waits: the transport calls again after letting the event loop run."""
        rows_left = budget
        for ch in [c for c in self.channels if c.sub is not None and not c.closing and not c.backlog_high]:
            sub = ch.sub
            assert sub is not None
            while (sub.header or sub.agents or sub.fill) and rows_left > 0:
                rows_left -= self._part(ch, sub, min(ROWS_PER_PART, rows_left))
        while self.snapshots and rows_left > 0:
            work = self.snapshots[0]
            if work.channel.closing:
                self.snapshots.popleft()
                continue
            ids = [work.ids.popleft() for _ in range(min(rows_left, len(work.ids)))]
            rows_left -= max(1, len(ids))
            work.rows.extend(self.row(v) for v in self.guard.snapshot(top=0, agents=ids).agents)
            if not work.ids:
                self.snapshots.popleft()
                top = self.guard.snapshot(top=work.top, agents=()).top_keys
                frame = StateFrame(
                    seq=self.seq,
                    full=True,
                    time=self.clock(),
                    agents=work.rows,
                    top_keys=top,
                    stats=self.current_stats(),
                    config=self.config_frame,
                )
                self.complete(work.channel, work.slot, SnapshotReply(frame).encode(work.rid))
        return rows_left <= 0 and self.has_pending_frames()

    def has_pending_frames(self) -> bool:
        if self.snapshots:
            return True
        return any(
            ch.sub is not None
            and not ch.closing
            and not ch.backlog_high
            and (ch.sub.header or ch.sub.agents or ch.sub.fill)
            for ch in self.channels
        )

    def _part(self, ch: Channel, sub: Subscription, rows: int) -> int:
        """Queue one state-frame part for a subscriber; returns the rows it took."""
        ids: list[str] = []
        pending, fill = sub.agents, sub.fill
        while (fill or pending) and len(ids) < rows:
            if fill:
                ids.append(fill.popleft())
                pending.discard(ids[-1])  # its current state goes now: a change before this needs no second row
            else:
                ids.append(pending.pop())
        header = sub.header
        view = self.guard.snapshot(top=10 if header else 0, agents=ids)
        agents = [self.row(v) for v in view.agents]
        frame = StateFrame(
            seq=self.seq,
            full=sub.full and header,
            time=self.clock(),
            agents=agents,
            part=0 if header else 1,
            last=not pending and not fill,
        )
        if header:
            frame.gone = sorted(sub.gone)
            frame.top_keys = view.top_keys
            frame.trips = list(sub.trips)
            frame.stats = self.current_stats()
            frame.config = self.config_frame if (sub.config or sub.full) else None
            sub.gone.clear()
            sub.trips.clear()
            sub.config = False
            sub.header = False
            sub.full = False
        ch.urgent.append(encode_frame(frame.to_json()))
        self.woken.add(ch)
        return max(1, len(ids))
