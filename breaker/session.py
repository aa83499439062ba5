"""The guard's side of the protocol, without I/O: bytes in from each connection, replies and events out.

`ServerSession` owns the `Guard`, every connection's protocol state (`Channel`: its frame buffer, its
plane, its replies in request order, its subscription) and what subscribers and the state store have
not seen yet. The transport (breaker/server.py) feeds it bytes and writes out what it hands back;
whatever needs I/O — writing the patch layer, running an interrupt command, saving state, appending
an incident line — comes back as a job in `jobs`, and a reply waiting on one holds its place in the
connection's reply order until the transport completes it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from breaker import __version__
from breaker.config import BY_KEY, PATCH_ONLY_KEYS, ConfigError
from breaker.engine import DENY_KINDS, AgentState, AgentView, Guard
from breaker.hookwire import serve as serve_hook
from breaker.keys import Judged, preview
from breaker.protocol import (
    ALLOW_FRAME_TAIL,
    HARNESS,
    HARNESS_OPS,
    MAX_FRAME,
    OPERATOR,
    PROTOCOL_VERSION,
    AgentEnd,
    AgentRow,
    CallRow,
    CallsEvent,
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
    InterruptEvent,
    KeyRow,
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
    SnapshotReply,
    StateFrame,
    Stats,
    StatsReply,
    Subscribe,
    TripRow,
    Unfollow,
    Uninterrupt,
    Unsubscribe,
    decode_request,
    encode_frame,
)
from breaker.tally import ALLOW, DENY, PASS, WARN, Tally
from breaker.wire import FrameBuffer

__all__ = [
    "BATCH",
    "AgentMeta",
    "Channel",
    "CommandJob",
    "ConfigJob",
    "DecisionJob",
    "DurableJob",
    "IncidentJob",
    "JudgeJob",
    "ServerSession",
    "Slot",
]

log = logging.getLogger("cbconsole.guard")

BATCH = 64  # frames answered per turn before other connections get theirs
TURN_BYTES = 64 * 1024  # ... and bytes: a turn ends after the first frame that reaches this many
WRITE_HIGH = 256 * 1024  # a connection's unsent output past which it is "not reading" (the transport pauses it)
PRIVATE_BUFFER = 64 * 1024  # what any connection may buffer of an unfinished frame without asking the pool
POOL = 64 * 1024 * 1024  # unfinished frames past PRIVATE_BUFFER share this, across every connection
DROP_AFTER = 10.0  # seconds a subscriber may stay behind before it is dropped
MAX_TRIPS_BEHIND = 500  # trips kept for a subscriber that is behind; older ones are dropped
ROWS_PER_PART = 25  # agent rows per state-frame part: one part takes a few hundred microseconds to build
HISTORY = 200  # calls kept per followed agent (only agents a console follows have a history)
MAX_FOLLOWED = 64  # agents followed at once, across every connection: history memory is at most 64 x 200 calls
FOLLOW_KEYS = 20  # repeated keys of its window sent with a followed agent's calls
FORBIDDEN_KEYS = PATCH_ONLY_KEYS  # their effect reaches outside the guard: only the patch file the user edits sets them


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

    def __init__(self, plane: str, peer_pid: int | None, max_frame: int) -> None:
        self.plane = plane
        self.peer_pid = peer_pid
        self.buf = FrameBuffer(max_frame)
        self.out: deque[bytes | Slot] = deque()  # replies in request order; a Slot waits for its job
        self.urgent: list[bytes] = []  # events: not tied to a request, sent at once
        self.harness = ""
        self.role = ""
        self.checked = False
        self.agents: set[str] = set()  # agents this connection checked for: interrupt pushes go here
        self.sub: _Subscription | None = None
        self.behind_since: float | None = None
        self.backlog_high = False  # the transport says: its unsent output is over WRITE_HIGH
        self.blocked: Slot | None = None  # a config_set in progress: later requests wait to see its effect
        self.pooled = 0  # bytes of this connection's buffer counted against the shared POOL
        self.eof = False
        self.closing = False  # no more input is read; close once the output is out
        self.close_reason = ""
        self.following: str | None = None  # the agent whose calls this connection follows
        self.follow_seq = 0  # the number of the last of its calls sent here (-1: send its keys again)

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
class _Subscription:
    """What a subscriber has not been sent yet."""

    fill: deque[str] = field(default_factory=deque)  # the full picture still to send (ids, in order)
    agents: set[str] = field(default_factory=set)  # agents that changed since they were last sent
    gone: set[str] = field(default_factory=set)
    trips: deque[TripRow] = field(default_factory=lambda: deque(maxlen=MAX_TRIPS_BEHIND))
    config: bool = True
    full: bool = True  # the next frame starts a full picture
    header: bool = True  # the next frame carries the header (gone, top keys, trips, stats, config)


@dataclass(slots=True)
class _Follow:
    """A followed agent's last HISTORY calls and the connections following it."""

    calls: deque[CallRow] = field(default_factory=lambda: deque(maxlen=HISTORY))
    seq: int = 0  # calls recorded since the follow began (the number of the last one)
    channels: set[Channel] = field(default_factory=set)


@dataclass(slots=True)
class AgentMeta:
    """What the harness told the guard about an agent, and the connections that checked for it."""

    harness: str
    parent: str | None
    channels: set[Channel] = field(default_factory=set)


# -- jobs for the transport ------------------------------------------------------------------------


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

    decision: str  # "deny" or "warn"
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


@dataclass(slots=True)
class _SnapshotWork:
    channel: Channel
    slot: Slot
    rid: Any
    ids: deque[str]
    rows: list[AgentRow]
    top: int


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
        self.tick_interval = tick
        self.max_frame = max_frame
        self.pool = pool
        self.pooled = 0
        self.fill_command = fill_command
        self.started = clock()
        self.channels: set[Channel] = set()
        self.woken: set[Channel] = set()  # have output to write, or are done
        self.jobs: deque[Job] = deque()
        self.meta: dict[str, AgentMeta] = {}
        self.stats = GuardStats(pid=pid)  # the transport fills in sockets, incident log, state file
        self.on_stats: Callable[[], Any] | None = None  # the transport's hook to refresh its part of the stats
        self.config_frame = ConfigFrame(values=guard.config.to_mapping())
        # what the next tick and the next save have not seen
        self._dirty: set[str] = set()
        self._gone: set[str] = set()
        self._trips: list[TripRow] = []
        self._config_changed = False
        self.unsaved: set[str] = set()  # agents whose state changed (or went away) since the last save
        self.unsaved_guard = True  # interrupts, pause or the counters changed since the last save
        self._seq = 0
        self._snapshots: deque[_SnapshotWork] = deque()
        self._stats_sent: tuple[Any, ...] = ()
        self.follows: dict[str, _Follow] = {}
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
        self._handlers: dict[type[Request], Callable[[Channel, Any], bytes | Slot | None]] = {
            Hello: self._hello,
            AgentEnd: self._agent_end,
            Ping: lambda ch, req: Pong().encode(req.id),
            Subscribe: self._subscribe,
            Unsubscribe: self._unsubscribe,
            Interrupt: self._interrupt,
            Uninterrupt: self._uninterrupt,
            Reset: self._reset,
            Override: self._override,
            Follow: self._follow,
            Unfollow: self._unfollow,
            Pause: self._pause,
            Resume: self._resume,
            ConfigGet: lambda ch, req: ConfigReply(self.config_frame).encode(req.id),
            ConfigSet: self._config_set,
            Snapshot: self._snapshot,
            Stats: lambda ch, req: StatsReply(self.current_stats()).encode(req.id),
            HookCall: self._hook,
        }

    # -- connections ----------------------------------------------------------------------------

    def open(self, plane: str, peer_uid: int | None, peer_pid: int | None) -> Channel:
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
        self._stop_following(ch)

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

    # -- requests -------------------------------------------------------------------------------

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
        if type(req) is Check:
            return self._check(ch, req, judged)
        if ch.plane != OPERATOR and req.op not in HARNESS_OPS:
            return ErrorReply(
                "operator_only",
                f"{req.op} changes the guard or reads other agents' calls: it is served only on the operator's socket",
            ).encode(req.id)
        if type(req) is Result:
            return self._result(ch, req, judged)
        try:
            return self._handlers[type(req)](ch, req)
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
        v = self.guard.check(
            agent, req.tool, req.args, now, unjudgeable=req.args_unserializable, call_id=req.call_id, judged=judged
        )
        if self.follows and agent in self.follows:
            self._record(self.follows[agent], req, v, now, judged)
        if v.counted or not v.allowed:
            self._dirty.add(agent)
            self.unsaved.add(agent)
        counts = self.tally.rows.get(meta.harness) or self.tally.row(meta.harness)
        rid = req.id
        if v.allowed:
            if v.warning:
                counts[WARN] += 1
                self._warned(agent, meta, req, v, now)
                return Decision(True, count=v.count, limit=v.limit, warning=v.warning, rule=v.rule).encode(rid)
            counts[ALLOW if v.counted else PASS] += 1
            if type(rid) is int and -(2**63) <= rid < 2**63:
                return b'{"id":%d' % rid + ALLOW_FRAME_TAIL
            return Decision(True).encode(rid)
        counts[DENY] += 1
        kind = v.kind or ""
        self.tally.denies[kind] = self.tally.denies.get(kind, 0) + 1
        if v.first:
            self._trip(agent, req.tool, kind, v.count, v.limit, now)
        if self.export_decisions:
            self._export("deny", kind, agent, meta, req, v.count, v.limit, v.reason, v.first, now)
        deny = {"id": rid, "decision": "deny", "kind": v.kind, "reason": v.reason, "count": v.count, "limit": v.limit}
        return encode_frame(deny)  # a Decision's shape, without building one (test_protocol_doc holds the fields)

    @staticmethod
    def _record(follow: _Follow, req: Check, v: Any, now: float, judged: Judged | None = None) -> None:
        """One call of a followed agent, into its history."""
        if not v.allowed:
            decision = "deny"
        elif v.warning:
            decision = "warn"
        else:
            decision = "allow" if v.counted else "pass"
        if req.args_unserializable or (judged is not None and judged.key is None):
            text = "(args that could not be serialized)"
        else:
            text = judged.preview if judged is not None else preview(req.tool, req.args)
        follow.calls.append(CallRow(now, req.tool, text, decision, v.count, v.limit, v.rule or ""))
        follow.seq += 1

    def _warned(self, agent: str, meta: AgentMeta, req: Check, v: Any, now: float) -> None:
        rule = v.rule or ""
        self.tally.warnings[rule] = self.tally.warnings.get(rule, 0) + 1
        if self.export_decisions:
            self._export("warn", rule, agent, meta, req, v.count, v.limit, v.warning, False, now)

    def _export(
        self,
        decision: str,
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
                decision,
                rule,
                agent,
                req.tool,
                req.call_id,
                meta.harness,
                meta.parent,
                root,
                count,
                limit,
                text,
                first,
                now,
            )
        )

    def _trip(self, agent: str, tool: str, kind: str, count: int, limit: int, now: float) -> None:
        self.tally.trips[kind] = self.tally.trips.get(kind, 0) + 1
        self.jobs.append(IncidentJob(kind, tool, count, limit, agent, now))
        self._trips.append(TripRow(now, agent, kind, tool, count, limit))
        log.info("trip %s: agent %r, tool %r, %d/%d", kind, agent, tool, count, limit)

    def _removed(self, agent: str) -> None:
        """The engine let an agent go (evicted, or ended): subscribers and the store forget it too."""
        self._gone.add(agent)
        self._dirty.discard(agent)
        self.unsaved.add(agent)
        if not self.guard.interrupted(agent):
            self._drop_meta(agent)

    def _drop_meta(self, agent: str) -> None:
        meta = self.meta.pop(agent, None)
        if meta is not None:
            for ch in meta.channels:
                ch.agents.discard(agent)

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
            self.unsaved.add(req.agent)
        return Done(matched=matched, warning=warning).encode(req.id)

    def _agent_end(self, ch: Channel, req: AgentEnd) -> bytes:
        known = self.guard.end_agent(req.agent)
        return Done(known=known).encode(req.id)

    def _subscribe(self, ch: Channel, req: Subscribe) -> bytes:
        ch.sub = _Subscription(fill=deque(self._known_ids()))  # the first frames: the full picture
        ch.role = ch.role or "console"
        return Done(tick=self.tick_interval).encode(req.id)

    def _unsubscribe(self, ch: Channel, req: Unsubscribe) -> bytes:
        ch.sub = None
        return Done().encode(req.id)

    def _follow(self, ch: Channel, req: Follow) -> bytes:
        agent = req.agent
        follow = self.follows.get(agent)
        if follow is None:
            mine = self.follows.get(ch.following) if ch.following is not None else None
            freed = mine is not None and mine.channels == {ch}  # replacing its own follow frees one
            if len(self.follows) - freed >= MAX_FOLLOWED:
                return ErrorReply("limit", f"{MAX_FOLLOWED} agents are followed already; unfollow one first").encode(
                    req.id
                )
        self._stop_following(ch)
        if follow is None:
            follow = self.follows[agent] = _Follow()
        follow.channels.add(ch)
        ch.following = agent
        ch.follow_seq = -1  # the next tick sends its history and keys
        return Done(known=self.guard.known(agent), history=HISTORY).encode(req.id)

    def _unfollow(self, ch: Channel, req: Unfollow) -> bytes:
        self._stop_following(ch)
        return Done().encode(req.id)

    def _stop_following(self, ch: Channel) -> None:
        agent, ch.following = ch.following, None
        if agent is None:
            return
        follow = self.follows.get(agent)
        if follow is not None:
            follow.channels.discard(ch)
            if not follow.channels:
                del self.follows[agent]  # nobody follows it: its history goes

    def _push_calls(self, changed: set[str]) -> None:
        """A tick: each following connection gets its agent's calls since the last push (and its window's
        repeated keys when they may have changed). One that reads nothing is skipped; later it gets the
        last HISTORY calls and how many it missed."""
        guard = self.guard
        for agent, follow in self.follows.items():
            keys: tuple[list[Any], int] | None = None
            for ch in follow.channels:
                if ch.backlog_high or ch.closing:
                    continue
                fresh = ch.follow_seq < 0
                new = follow.seq - max(ch.follow_seq, 0) if not fresh else len(follow.calls)
                if not new and agent not in changed and not fresh:
                    continue
                kept = len(follow.calls)
                calls = list(follow.calls)[kept - min(new, kept) :] if new else []
                if keys is None:
                    keys = guard.window_keys(agent, FOLLOW_KEYS)
                rows = [KeyRow(k.agent, k.tool, k.preview, k.count) for k in keys[0]]
                dropped = 0 if fresh else max(0, new - kept)
                ch.urgent.append(CallsEvent(agent, calls, rows, keys[1], dropped).encode())
                ch.follow_seq = follow.seq
                self.woken.add(ch)

    def _durable(self, ch: Channel, data: bytes) -> Slot:
        """An operator's change is acknowledged once the state store has it (or at once, without one)."""
        slot = Slot()
        self.jobs.append(DurableJob(ch, slot, data))
        return slot

    def _interrupt(self, ch: Channel, req: Interrupt) -> Slot:
        agent, reason = req.agent, req.reason
        self.guard.interrupt(agent, reason)
        self._dirty.add(agent)
        self.unsaved_guard = True
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
        return self._durable(ch, Done(notified=told).encode(req.id))

    def _uninterrupt(self, ch: Channel, req: Uninterrupt) -> Slot:
        known = self.guard.uninterrupt(req.agent)
        self._dirty.add(req.agent)
        self.unsaved_guard = True
        if req.agent not in self.guard:
            self._gone.add(req.agent)
            self._drop_meta(req.agent)
        return self._durable(ch, Done(known=known).encode(req.id))

    def _reset(self, ch: Channel, req: Reset) -> Slot:
        known = self.guard.reset(req.agent)
        self._dirty.add(req.agent)
        self.unsaved.add(req.agent)
        self.unsaved_guard = True  # its override, if any, is gone
        return self._durable(ch, Done(known=known).encode(req.id))

    def _override(self, ch: Channel, req: Override) -> Slot:
        own = self.guard.override(req.agent, req.limits)
        if own is not None:
            self._dirty.add(req.agent)
            self.unsaved.add(req.agent)
            self.unsaved_guard = True  # kept apart from the agent: in the guard's own record
            log.info("override: agent %r now has %s", req.agent, own or "the config's limits")
        return self._durable(ch, Done(known=own is not None, override=own).encode(req.id))

    def _pause(self, ch: Channel, req: Pause) -> Slot:
        self.guard.pause()
        self.unsaved_guard = True
        log.info("guard paused: every call is allowed and not recorded")
        return self._durable(ch, Done(paused=True).encode(req.id))

    def _resume(self, ch: Channel, req: Resume) -> Slot:
        self.guard.resume()
        self.unsaved_guard = True
        log.info("guard resumed")
        return self._durable(ch, Done(paused=False).encode(req.id))

    def _config_set(self, ch: Channel, req: ConfigSet) -> bytes | Slot:
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

    def _snapshot(self, ch: Channel, req: Snapshot) -> Slot:
        """Built a part at a time by `pump`, like a subscriber's full frame: a guard with thousands
        of agents answers without holding up anyone's check."""
        slot = Slot()
        ids = deque(self._known_ids())
        self._snapshots.append(_SnapshotWork(ch, slot, req.id, ids, [], req.top))
        return slot

    # -- config ---------------------------------------------------------------------------------

    def set_config_frame(self, frame: ConfigFrame) -> None:
        """The config in force and where it came from changed (the transport loaded the layers)."""
        self.config_frame = frame
        self._config_changed = True
        self._dirty.update(self.guard.agents())  # windows, limits and statuses of every agent may change
        self._dirty.update(self.guard.interrupted_agents())

    # -- state for subscribers ------------------------------------------------------------------

    def _known_ids(self) -> list[str]:
        """Every agent an operator sees: tracked ones, most recently active first, then interrupted ones."""
        guard = self.guard
        ids = guard.agents()
        ids.reverse()
        ids.extend(a for a in reversed(guard.interrupted_agents()) if a not in guard)
        return ids

    def row(self, view: AgentView) -> AgentRow:
        meta = self.meta.get(view.agent)
        return AgentRow(
            view.agent,
            meta.harness if meta is not None else "",
            meta.parent if meta is not None else None,
            view.calls,
            view.window_fill,
            view.window,
            view.cap,
            view.worst_count,
            view.worst_tool,
            view.worst_preview,
            view.duplicate_limit,
            view.denies,
            view.status,
            view.last_tool,
            view.last_seen,
            view.interrupt_reason,
            view.warns,
            view.rule,
            view.override,
        )

    def current_stats(self) -> GuardStats:
        if self.on_stats is not None:
            self.on_stats()
        stats = self.stats
        guard = self.guard
        harnesses: dict[str, int] = {}
        for ch in self.channels:
            if ch.is_harness:
                name = ch.harness or "unknown"
                harnesses[name] = harnesses.get(name, 0) + 1
        stats.checks = guard.checks
        stats.denies = dict(guard.denies)
        stats.warnings = guard.warnings
        stats.agents = len(guard)
        stats.connections = len(self.channels)
        stats.harnesses = harnesses
        stats.paused = guard.paused
        stats.uptime = self.clock() - self.started
        return stats

    def _stats_signature(self) -> tuple[Any, ...]:
        """What the header shows, cheaply: a change here is worth a frame even if no agent changed."""
        guard, stats = self.guard, self.stats
        return (
            guard.checks,
            tuple(guard.denies.values()),
            guard.warnings,
            guard.paused,
            len(self.channels),
            stats.incident_log_error,
            stats.state_error,
        )

    def tick(self, now_monotonic: float) -> None:
        """A subscriber tick: hand what changed since the last one to every subscriber's backlog.
        The frames themselves are built by `pump`, a part at a time."""
        subscribers = [ch for ch in self.channels if ch.sub is not None and not ch.closing]
        changed, self._dirty = self._dirty, set()
        gone = {a for a in self._gone if not self.guard.known(a)}
        self._gone = set()
        trips, self._trips = self._trips, []
        config = self._config_changed
        self._config_changed = False
        signature = self._stats_signature()
        stats_changed = signature != self._stats_sent
        self._stats_sent = signature
        self._seq += 1
        if self.follows:
            self._push_calls(changed)
        for ch in subscribers:
            sub = ch.sub
            assert sub is not None
            if ch.backlog_high:
                if ch.behind_since is None:
                    ch.behind_since = now_monotonic
                elif now_monotonic - ch.behind_since > DROP_AFTER:
                    log.warning("dropped a subscriber (pid %s) that read nothing for %.0f s", ch.peer_pid, DROP_AFTER)
                    self._close(ch)
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
        while self._snapshots and rows_left > 0:
            work = self._snapshots[0]
            if work.channel.closing:
                self._snapshots.popleft()
                continue
            ids = [work.ids.popleft() for _ in range(min(rows_left, len(work.ids)))]
            rows_left -= max(1, len(ids))
            work.rows.extend(self.row(v) for v in self.guard.snapshot(top=0, agents=ids).agents)
            if not work.ids:
                self._snapshots.popleft()
                top = self.guard.snapshot(top=work.top, agents=()).top_keys
                frame = StateFrame(
                    self._seq,
                    True,
                    self.clock(),
                    work.rows,
                    top_keys=[KeyRow(k.agent, k.tool, k.preview, k.count) for k in top],
                    stats=self.current_stats(),
                    config=self.config_frame,
                )
                self.complete(work.channel, work.slot, SnapshotReply(frame).encode(work.rid))
        return rows_left <= 0 and self.has_pending_frames()

    def has_pending_frames(self) -> bool:
        if self._snapshots:
            return True
        return any(
            ch.sub is not None
            and not ch.closing
            and not ch.backlog_high
            and (ch.sub.header or ch.sub.agents or ch.sub.fill)
            for ch in self.channels
        )

    def _part(self, ch: Channel, sub: _Subscription, rows: int) -> int:
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
            self._seq,
            sub.full and header,
            self.clock(),
            agents,
            part=0 if header else 1,
            last=not pending and not fill,
        )
        if header:
            frame.gone = sorted(sub.gone)
            frame.top_keys = [KeyRow(k.agent, k.tool, k.preview, k.count) for k in view.top_keys]
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

    # -- the state store ------------------------------------------------------------------------

    def take_unsaved(self, budget: int) -> tuple[list[tuple[str, AgentState | None, str, str | None]], bool]:
        """Up to `budget` agents whose state changed since the last save: (agent, its state or None
        when it is gone, harness, parent). The second value: more are waiting."""
        out: list[tuple[str, AgentState | None, str, str | None]] = []
        unsaved = self.unsaved
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
        self.unsaved.clear()
        self.unsaved_guard = False
