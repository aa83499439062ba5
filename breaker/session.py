"""The guard's side of the protocol, without I/O: bytes in from each connection, replies and events out.

`ServerSession` owns the `Guard`, every connection's protocol state (`Channel`, breaker/channel.py: its
frame buffer, its plane, its replies in request order, its subscription), the op table, and the check.
Its rooms own the rest: `Subscribers` (breaker/frames.py) what subscribers have not been sent yet,
`Follows` (breaker/follows.py) the calls of followed agents, `OperatorChanges` (breaker/changes.py) the
ops that change the guard, `Persistence` (breaker/persist.py) what the state store has not seen,
`StatsBoard` (breaker/stats.py) the stats. The transport (breaker/server.py)
feeds it bytes and writes out what it hands back; whatever needs I/O — writing the patch layer, running
an interrupt command, saving state, appending an incident line — comes back as a job in `jobs`
(breaker/jobs.py), and a reply waiting on one holds its place in the connection's reply order until the
transport completes it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from breaker import __version__
from breaker.changes import OperatorChanges
from breaker.channel import AgentMeta, Channel, Slot, drop_meta
from breaker.engine import DENY_KINDS, Guard
from breaker.follows import RECENT, Follows
from breaker.frames import ROWS_PER_PART, Subscribers
from breaker.hookwire import serve as serve_hook
from breaker.jobs import DecisionJob, IncidentJob, Job, JudgeJob
from breaker.keys import Judged
from breaker.persist import Persistence
from breaker.protocol import (
    HARNESS_OPS,
    MAX_FRAME,
    OPERATOR,
    PROTOCOL_VERSION,
    AgentEnd,
    Check,
    ConfigFrame,
    ConfigGet,
    ConfigReply,
    ConfigSet,
    Decision,
    Done,
    ErrorReply,
    Follow,
    GuardStats,
    Hello,
    HelloReply,
    HookCall,
    HookReply,
    Interrupt,
    Override,
    Pause,
    Ping,
    Pong,
    ProtocolError,
    Request,
    Reset,
    Result,
    Resume,
    Snapshot,
    Stats,
    StatsReply,
    Subscribe,
    TripRow,
    Unfollow,
    Uninterrupt,
    Unsubscribe,
    decode_request,
)
from breaker.stats import StatsBoard
from breaker.tally import ALLOW, DENY, PASS, WARN, Tally
from breaker.vocab import Outcome, Plane

__all__ = ["BATCH", "POOL", "PRIVATE_BUFFER", "TURN_BYTES", "Handler", "KeyedHandler", "ServerSession"]

log = logging.getLogger("cbconsole.guard")

BATCH = 64  # frames answered per turn before other connections get theirs
TURN_BYTES = 64 * 1024  # ... and bytes: a turn ends after the first frame that reaches this many
PRIVATE_BUFFER = 64 * 1024  # what any connection may buffer of an unfinished frame without asking the pool
POOL = 64 * 1024 * 1024  # unfinished frames past PRIVATE_BUFFER share this, across every connection

Handler = Callable[[Channel, Any], "bytes | Slot | None"]  # an op: its reply, a Slot a job fills, or None
KeyedHandler = Callable[[Channel, Any, "Judged | None"], "bytes | Slot | None"]  # ... keying args (maybe judged)


# -- the session -----------------------------------------------------------------------------------


class ServerSession:
    """The guard behind the protocol. `clock()` gives wall time (for rows and trips only)."""

    def __init__(
        self,
        guard: Guard,
        *,
        clock: Callable[[], float],
        owner_uid: int,
        pid: int = 0,
        tick: float = 0.1,
        max_frame: int = MAX_FRAME,
        pool: int = POOL,
        fill_command: Callable[[str, str], list[str] | None] | None = None,
    ) -> None:
        self.guard = guard
        guard.on_remove = self._removed
        self.clock = clock
        self.owner_uid = owner_uid
        self.max_frame = max_frame
        self.pool = pool
        self.pooled = 0
        self.channels: set[Channel] = set()
        self.woken: set[Channel] = set()  # have output to write, or are done
        self.jobs: deque[Job] = deque()
        self.meta: dict[str, AgentMeta] = {}
        self.stats = StatsBoard(pid=pid, started=clock())  # the transport attaches its parts
        self.follows = Follows(guard, self.woken, self.meta)
        self.frames = Subscribers(
            guard,
            meta=self.meta,
            channels=self.channels,
            woken=self.woken,
            follows=self.follows,
            stats=self.stats,
            clock=clock,
            close=self._close,
            complete=self.complete,
            tick=tick,
        )
        self.persist = Persistence(guard, self.meta)
        self.changes = OperatorChanges(
            guard,
            meta=self.meta,
            jobs=self.jobs,
            woken=self.woken,
            frames=self.frames,
            persist=self.persist,
            stats=self.stats,
            fill_command=fill_command,
        )
        # The rooms' sets the check adds to, held here so the hot path reaches them in one step.
        self._changed = self.frames.changed
        self._unsaved = self.persist.agents
        self._followed = self.follows.agents
        self._fresh = self.follows.fresh
        # For the metrics: counts kept as checks are answered, and (while `timer` is set, a monotonic clock
        # in seconds) the server's time per check. `export_decisions`: queue a DecisionJob per deny and warning.
        self.tally = Tally(DENY_KINDS, tuple(k for k in DENY_KINDS if k != "interrupted"))
        # Frames of `judge_from` bytes or more go to the judge process as JudgeJobs (None: every frame is
        # read here; the transport sets it when it has a judge). `judging`: their bytes in flight, which
        # count against the pool like unfinished frames.
        self.judge_from: int | None = None
        self.judging = 0
        self.timer: Callable[[], float] | None = None
        self.export_decisions = False
        # The ops, by request type. `keyed`: ops whose args are keyed, which the judge may have read already.
        frames, follows, changes = self.frames, self.follows, self.changes
        self.keyed: dict[type[Request], KeyedHandler] = {Check: self._check, Result: self._result}
        self.handlers: dict[type[Request], Handler] = {
            Hello: self._hello,
            AgentEnd: self._agent_end,
            Ping: lambda ch, req: Pong().encode(req.id),
            Subscribe: frames.subscribe,
            Unsubscribe: frames.unsubscribe,
            Interrupt: changes.interrupt,
            Uninterrupt: changes.uninterrupt,
            Reset: changes.reset,
            Override: changes.override,
            Follow: follows.follow,
            Unfollow: follows.unfollow,
            Pause: changes.pause,
            Resume: changes.resume,
            ConfigGet: lambda ch, req: ConfigReply(frames.config_frame).encode(req.id),
            ConfigSet: changes.config_set,
            Snapshot: frames.snapshot,
            Stats: lambda ch, req: StatsReply(self.current_stats()).encode(req.id),
            HookCall: self._hook,
        }

    # -- connections -------------------------------------------------------------------------------------------------

    def open(self, plane: Plane, peer_uid: int | None, peer_pid: int | None) -> Channel:
        """A new connection on `plane`. A peer the kernel says is another user is refused (its
        channel starts closing with a `forbidden` error); where the platform cannot say (uid None),
        the socket's private directory is the only gate."""
        ch = Channel(plane, peer_pid, self.max_frame)
        if peer_uid is not None and peer_uid != self.owner_uid:
            log.warning(
                "refused a connection on the %s socket from uid %s (pid %s): the guard serves only uid %s",
                plane,
                peer_uid,
                peer_pid,
                self.owner_uid,
            )
            self._close(ch, ErrorReply("forbidden", "this guard serves only its own user").encode(None))
            return ch
        self.channels.add(ch)
        return ch

    def receive(self, ch: Channel, data: bytes) -> None:
        """Bytes read from a connection; answers what is complete (one turn of at most BATCH frames)."""
        if ch.closing:
            return
        ch.buf.feed(data)
        if not self._account(ch):
            return
        self.turn(ch)

    def _account(self, ch: Channel) -> bool:
        """Count what `ch` buffers past its private allowance against the shared pool; a connection
        that would overflow the pool is told `busy` and closed. False if it was."""
        size = len(ch.buf)
        if size <= PRIVATE_BUFFER and not ch.pooled:
            return True  # the common case: a few hundred bytes, nothing to count
        over = max(0, size - PRIVATE_BUFFER)
        if over > ch.pooled and self.pooled - ch.pooled + over > self.pool:
            log.warning(
                "closed a connection (pid %s) buffering a %d-byte frame: %d bytes of large frames are already "
                "waiting, the limit is %d",
                ch.peer_pid,
                len(ch.buf),
                self.pooled - ch.pooled,
                self.pool,
            )
            self._close(ch, ErrorReply("busy", "the guard is receiving too many large frames; retry").encode(None))
            return False
        self.pooled += over - ch.pooled
        ch.pooled = over
        return True

    def turn(self, ch: Channel) -> bool:
        """Answer up to BATCH complete frames of `ch`. True if more are waiting (the transport
        lets other connections in first, then calls again); never while its output is backed up."""
        if ch.closing or ch.backlog_high or ch.blocked is not None:
            return False
        frames = ch.buf.frames(BATCH, TURN_BYTES)
        if frames:
            handle = self._handle
            out = ch.out
            for n, frame in enumerate(frames):
                reply = handle(ch, frame)
                if reply is not None:
                    out.append(reply)
                if ch.closing:
                    break
                if ch.blocked is not None:  # put back what it must not see yet
                    ch.buf.unread(frames[n + 1 :])
                    break
            self.woken.add(ch)
        self._account(ch)
        if ch.buf.too_large and not ch.closing:
            self.stats.frames_too_large += 1
            message = f"a frame is over the {ch.buf.limit:,}-byte limit; closing"
            self._close(ch, ErrorReply("frame_too_large", message).encode(None))
            return False
        if ch.blocked is not None:
            return False
        more = ch.buf.pending()
        if not more and ch.eof:
            self._close(ch)
        return more

    def eof(self, ch: Channel) -> bool:
        """The peer is done sending: answer what it sent (a last frame without its newline too), then
        close once every reply is out. True if more frames wait (as for `turn`)."""
        ch.eof = True
        if ch.closing:
            return False
        ch.buf.feed(b"\n")  # ends a last unterminated frame; an empty line is skipped
        return self.turn(ch)

    def lost(self, ch: Channel) -> None:
        """The connection is gone."""
        ch.closing = True
        self.channels.discard(ch)
        self.woken.discard(ch)
        self.pooled -= ch.pooled
        ch.pooled = 0
        for agent in ch.agents:
            meta = self.meta.get(agent)
            if meta is not None:
                meta.channels.discard(ch)
        ch.agents.clear()
        self.follows.stop(ch)

    def _close(self, ch: Channel, last: bytes = b"") -> None:
        """Stop reading `ch`; it closes once its output (and `last`) is out."""
        if last:
            ch.out.append(last)
        ch.closing = True
        self.woken.add(ch)

    def complete(self, ch: Channel, slot: Slot, data: bytes) -> bool:
        """A job is done: its reply takes its place in the connection's order. True if the connection
        has requests that waited for it (the transport gives it a turn)."""
        slot.data = data
        self.woken.add(ch)
        if ch.blocked is slot:
            ch.blocked = None
            if ch.closing:
                return False
            if ch.buf.pending() or ch.eof:
                return True
        return False

    def set_backlog(self, ch: Channel, high: bool) -> None:
        """The transport's word on whether `ch`'s unsent output is over WRITE_HIGH."""
        ch.backlog_high = high
        if not high:
            ch.behind_since = None

    # -- requests ----------------------------------------------------------------------------------------------------

    def _handle(self, ch: Channel, frame: bytes) -> bytes | Slot | None:
        if self.judge_from is not None and len(frame) >= self.judge_from:
            return self._to_judge(ch, frame)
        timer = self.timer
        start = timer() if timer is not None else 0.0
        try:
            req = decode_request(frame)
        except ProtocolError as exc:
            return ErrorReply(exc.code, exc.message).encode(exc.request_id)
        if type(req) is Check:
            if timer is None:
                return self._check(ch, req)
            reply = self._check(ch, req)
            self.tally.observe(timer() - start)
            return reply
        return self._dispatch(ch, req, None)

    def _dispatch(self, ch: Channel, req: Request, judged: Judged | None) -> bytes | Slot | None:
        """Answer a decoded request by the op tables (`judged`: its args as the judge keyed them)."""
        if ch.plane != OPERATOR and req.op not in HARNESS_OPS:
            return ErrorReply(
                "operator_only",
                f"{req.op} changes the guard or reads other agents' calls: it is served only on the operator's socket",
            ).encode(req.id)
        keyed = self.keyed.get(type(req))
        if keyed is not None:
            return keyed(ch, req, judged)
        try:
            return self.handlers[type(req)](ch, req)
        except Exception as exc:  # a bug in an operator op must not take the connection down
            log.exception("op %s failed", req.op)
            return ErrorReply("internal", f"{req.op} failed: {exc}").encode(req.id)

    def _hook(self, ch: Channel, req: HookCall) -> bytes:
        """cbhook's payload: breaker.hookwire reads it, and asks its requests here as if they came on `ch` (never
        through the judge: the op's payload is small)."""

        def ask(frame: bytes) -> bytes:
            try:
                reply = self._dispatch(ch, decode_request(frame), None)
            except ProtocolError as exc:
                return ErrorReply(exc.code, exc.message).encode(exc.request_id)
            return reply if isinstance(reply, bytes) else b"{}"

        return HookReply(*serve_hook(req.payload, req.harness, req.fail_closed, ask)).encode(req.id)

    def _to_judge(self, ch: Channel, frame: bytes) -> Slot | None:
        """A large frame goes to the judge; the connection's later frames wait for it."""
        if self.judging + self.pooled + len(frame) > self.pool:
            log.warning(
                "closed a connection (pid %s): %d bytes of large frames already wait", ch.peer_pid, self.judging
            )
            self._close(ch, ErrorReply("busy", "the guard is reading too many large frames; retry").encode(None))
            return None
        slot = Slot()
        ch.blocked = slot
        self.judging += len(frame)
        self.jobs.append(JudgeJob(ch, slot, frame, self.guard.config.ignore_args))
        return slot

    def judged(self, ch: Channel, slot: Slot, size: int, answer: Any) -> bool:
        """The judge read a frame (`answer`: a breaker.judge.JudgeAnswer): answer it in its place. True if
        the connection has requests that waited for it (the transport gives it a turn)."""
        self.judging -= size
        if ch.closing or ch not in self.channels:
            return False
        result: bytes | Slot | None
        if answer.reply is not None:
            result = answer.reply
        else:
            try:
                req = decode_request(answer.request)
            except ProtocolError as exc:  # never: the judge wrote it; but a reply must take the slot
                result = ErrorReply(exc.code, exc.message).encode(exc.request_id)
            else:
                judged = None
                if answer.keyed:
                    judged = Judged(hash(answer.key) if answer.key is not None else None, answer.preview)
                result = self._dispatch(ch, req, judged)
        ch.blocked = None
        if isinstance(result, Slot):  # an op that waits in turn (a config write, a durable change)
            ch.out[ch.out.index(slot)] = result
        else:
            slot.data = result if result is not None else b""
        self.woken.add(ch)
        if ch.blocked is not None or ch.closing:
            return False
        return ch.buf.pending() or ch.eof

    # -- the check ---------------------------------------------------------------------------------------------------

    def _check(self, ch: Channel, req: Check, judged: Judged | None = None) -> bytes:
        agent = req.agent
        meta = self.meta.get(agent)
        if meta is None:
            meta = self.meta[agent] = AgentMeta(req.harness or ch.harness, req.parent)
        if ch not in meta.channels:
            meta.channels.add(ch)
            ch.agents.add(agent)
            ch.checked = True
        now = self.clock()
        v = self.guard.check(agent, req.tool, req.args, now, req.args_unserializable, req.call_id, judged)
        # Its recent calls, kept for every agent: what the check already holds goes into its ring, and the next
        # tick makes rows of it (Follows.settle): no preview is built here.
        made = meta.made
        if made < RECENT:
            meta.recent.append((now, req, v, judged))
        else:
            meta.recent[made % RECENT] = (now, req, v, judged)
        meta.made = made + 1
        self._fresh.add(agent)
        if self._followed and agent in self._followed:
            Follows.record(self._followed[agent], req, v, now, judged)
        if v.counted or not v.allowed:
            self._changed.add(agent)
            self._unsaved.add(agent)
        counts = self.tally.rows.get(meta.harness) or self.tally.row(meta.harness)
        rid = req.id
        if v.allowed:
            if v.warning:
                counts[WARN] += 1
                self._warned(agent, meta, req, v, now)
                return Decision(True, count=v.count, limit=v.limit, warning=v.warning, rule=v.rule).encode(rid)
            counts[ALLOW if v.counted else PASS] += 1
            return Decision.encode_allow(rid)
        counts[DENY] += 1
        kind = v.kind or ""
        self.tally.denies[kind] = self.tally.denies.get(kind, 0) + 1
        if v.first:
            self._trip(agent, req.tool, kind, v.count, v.limit, now)
        if self.export_decisions:
            self._export("deny", kind, agent, meta, req, v.count, v.limit, v.reason, v.first, now)
        return Decision.encode_deny(rid, v.kind, v.reason, v.count, v.limit)

    def _warned(self, agent: str, meta: AgentMeta, req: Check, v: Any, now: float) -> None:
        rule = v.rule or ""
        self.tally.warnings[rule] = self.tally.warnings.get(rule, 0) + 1
        if self.export_decisions:
            self._export("warn", rule, agent, meta, req, v.count, v.limit, v.warning, False, now)

    def _export(
        self,
        decision: Outcome,
        rule: str,
        agent: str,
        meta: AgentMeta,
        req: Check,
        count: int,
        limit: int,
        text: str,
        first: bool,
        now: float,
    ) -> None:
        root, seen = agent, {agent}
        parent = meta.parent
        while parent is not None and parent not in seen and len(seen) < 64:  # bounded, and safe from a cycle
            root = parent
            seen.add(parent)
            up = self.meta.get(parent)
            parent = up.parent if up is not None else None
        self.jobs.append(
            DecisionJob(
                decision=decision,
                rule=rule,
                agent=agent,
                tool=req.tool,
                call_id=req.call_id,
                harness=meta.harness,
                parent=meta.parent,
                conversation=root,
                count=count,
                limit=limit,
                text=text,
                first=first,
                when=now,
            )
        )

    def _trip(self, agent: str, tool: str, kind: str, count: int, limit: int, now: float) -> None:
        self.tally.trips[kind] = self.tally.trips.get(kind, 0) + 1
        self.jobs.append(IncidentJob(kind=kind, tool=tool, count=count, limit=limit, agent=agent, when=now))
        self.frames.trip(TripRow(time=now, agent=agent, kind=kind, tool=tool, count=count, limit=limit))
        self.persist.guard_changed = True  # the recent trips are saved with the guard's record
        log.info("trip %s: agent %r, tool %r, %d/%d", kind, agent, tool, count, limit)

    # -- agents and the harness ops ----------------------------------------------------------------------------------

    def _removed(self, agent: str) -> None:
        """The engine let an agent go (evicted, or ended): subscribers and the store forget it too."""
        self.frames.gone.add(agent)
        self._changed.discard(agent)
        self._unsaved.add(agent)
        if not self.guard.interrupted(agent):
            drop_meta(self.meta, agent)

    def _hello(self, ch: Channel, req: Hello) -> bytes:
        ch.harness = req.harness
        ch.role = req.role or "harness"
        return HelloReply(
            "cbconsole-guard", __version__, PROTOCOL_VERSION, self.stats.pid, ch.plane, self.max_frame
        ).encode(req.id)

    def _result(self, ch: Channel, req: Result, judged: Judged | None = None) -> bytes:
        matched, warning = self.guard.result(
            req.agent, req.digest, call_id=req.call_id, tool=req.tool, args=req.args, judged=judged
        )
        if matched:
            self._unsaved.add(req.agent)
        return Done(matched=matched, warning=warning).encode(req.id)

    def _agent_end(self, ch: Channel, req: AgentEnd) -> bytes:
        known = self.guard.end_agent(req.agent)
        return Done(known=known).encode(req.id)

    # -- the rooms' work, for the transport -----------------------------------------------------

    def set_config_frame(self, frame: ConfigFrame) -> None:
        """The config in force and where it came from changed (the transport loaded the layers)."""
        self.frames.set_config(frame)

    def current_stats(self) -> GuardStats:
        return self.frames.current_stats()

    def tick(self, now_monotonic: float) -> None:
        """A subscriber tick (Subscribers.tick)."""
        self.frames.tick(now_monotonic)

    def pump(self, budget: int = ROWS_PER_PART) -> bool:
        """Build pending state frames and snapshots (Subscribers.pump); True if more work waits."""
        return self.frames.pump(budget)
