"""The guard's memory across restarts: an append-only state file, written by a thread of its own.

Each save appends one record per agent whose state changed (its whole state: calls, denies, window
digests, repeated calls' previews, harness and parent), one per agent that went away, and one for
the guard (interrupts, pause, counters). The last record of an agent wins; when the file has grown
well past what it holds, the writer thread rewrites it with only the last records (atomically).

A record is `<body length u32><crc32 u32><kind u8><id length u16><id><JSON>`, little-endian, so a
torn last record (a crash mid-write) is found and dropped, and compaction needs no JSON parsing.
The file starts with a header record naming the format, its version, the process hash seed that
made the window digests, and a probe digest: a guard whose digests differ (another seed) keeps every
count and trip but not the windows.

The file is ours alone: it is opened only as a regular file (never through a symlink, never blocking on
a FIFO), read only up to MAX_STATE_BYTES (the writer compacts to stay under it), and locked for the
guard's life (`<name>.lock` beside it, holding the holder's pid), so a second guard on the same file
refuses to start. A file it cannot use is renamed aside (`<name>.bad-<time>`) and the guard starts clean.
"""

from __future__ import annotations

import array
import base64
import contextlib
import fcntl
import logging
import mmap
import os
import stat
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from breaker.engine import AgentState, Kind, Outcome
from breaker.worker import QueueWorker

__all__ = [
    "FORMAT",
    "MAX_STATE_BYTES",
    "AgentRecord",
    "GuardRecord",
    "SavedState",
    "StateLocked",
    "StateStore",
    "default_state_path",
    "digest_probe",
    "read_hash_seed",
]

log = logging.getLogger("cbconsole.guard")

FORMAT = "cbconsole-state"
VERSION = 1
_HEAD = struct.Struct("<IIBH")  # body length, crc32 of the rest, kind, id length
_HEADER, _AGENT, _GONE, _GUARD = 0, 1, 2, 3
_NONE = -1  # a window slot the guard could not judge (CPython's hash() never returns -1)
MAX_RECORD = 64 * 1024 * 1024
# The largest state file read or written. An agent's record at a full default window (200 calls) weighs
# 2.3 KB when every call differs and 16.5 KB when every call is made twice (100 previews), measured by
# tests/bench/bench_state.py; with every optional rule's state too, about 25 KB. The default `maxAgents`
# (10,000) at its fullest is therefore 160-250 MB: this is twice that. The writer compacts before a save
# would pass it, and saves only the guard's own record (interrupts, pause) when the agents alone are larger.
MAX_STATE_BYTES = 512 * 1024 * 1024
COMPACT_MIN = 8 * 1024 * 1024  # never compact a file smaller than this
COMPACT_RATIO = 4  # compact when the file is this many times what its last records weigh
_PROBE = b"cbconsole-state-probe"


def digest_probe() -> int:
    """This process's digest of a fixed text: equal in two processes only if their window digests are."""
    return hash(_PROBE)


def default_state_path(socket_path: Path, environ: Any = None) -> Path:
    """`$XDG_STATE_HOME/cbconsole/state/guard-<12 hex of the socket path>.cbstate`: one per guard socket."""
    import hashlib

    env = os.environ if environ is None else environ
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    tag = hashlib.sha256(os.fsencode(os.path.abspath(socket_path))).hexdigest()[:12]
    return base / "cbconsole" / "state" / f"guard-{tag}.cbstate"


@dataclass(slots=True)
class AgentRecord:
    state: AgentState
    harness: str
    parent: str | None


@dataclass(slots=True)
class GuardRecord:
    paused: bool = False
    checks: int = 0
    denies: dict[str, int] = field(default_factory=dict)
    interrupts: list[tuple[str, str, int, str, str | None]] = field(
        default_factory=list
    )  # agent, reason, denies, harness, parent
    warnings: int = 0
    overrides: dict[str, dict[str, int]] = field(default_factory=dict)  # the operator's per-agent limits
    trips: list[tuple[float, str, str, str, int, int]] = field(default_factory=list)  # the recent trips, oldest
    # first: time, agent, kind, tool, count, limit


@dataclass(slots=True)
class SavedState:
    """What a state file held, and what the guard should be told about it."""

    agents: list[AgentRecord] = field(default_factory=list)  # least recently saved first
    guard: GuardRecord | None = None
    windows: bool = True  # False: the digests were made with another hash seed
    notes: list[str] = field(default_factory=list)
    problem: str | None = None  # the file could not be used: the guard starts clean (said in notes too)


# -- encoding ---------------------------------------------------------------------------------------


def _frame(kind: int, ident: str, body: bytes) -> bytes:
    idb = ident.encode("utf-8", "surrogatepass")[:65535]
    rest = bytes([kind]) + len(idb).to_bytes(2, "little") + idb + body
    return struct.pack("<II", len(rest) - 3, zlib.crc32(rest)) + rest


def encode_agent(agent: str, state: AgentState | None, harness: str, parent: str | None) -> bytes:
    if state is None:
        return _frame(_GONE, agent, b"")
    try:
        ring = array.array("q", cast(list[int], state.ring))  # in C; a window holding None takes the slow way
    except TypeError:
        ring = array.array("q", [_NONE if k is None else k for k in state.ring])
    body = {
        "calls": state.calls,
        "denies": state.denies,
        "ring": base64.b64encode(ring.tobytes()).decode(),
        "previews": [[k, tool, text] for k, (tool, text) in state.previews.items()],
        "last_tool": state.last_tool,
        "last_seen": state.last_seen,
        "harness": harness,
        "parent": parent,
    }
    # the rules beyond the seed's, only when they hold something (a seed guard writes what it always did)
    if state.warns:
        body["warns"] = state.warns
    if state.last is not None:
        body["last"] = "{}:{}".format(*state.last)  # on disk as it always was: "warn:<rule>" or "deny:<kind>"
    if state.last_key is not None:
        body["last_key"], body["run"] = state.last_key, state.run
    if state.cycles:
        body["cycles"] = state.cycles
    if state.recent:
        body["recent"] = state.recent
    if state.before:
        body["before"] = [[k, n] for k, n in state.before.items()]
    if state.results:
        body["results"] = [[k, d] for k, d in state.results.items()]
    if state.wrote:
        body["wrote"] = state.wrote
    if state.alike:
        body["alike"] = [[k, m] for k, m in state.alike.items()]
    if state.tool_calls:
        body["tool_calls"] = state.tool_calls
    if state.stall:
        body["stall"] = state.stall
    if state.polls:
        body["polls"] = state.polls
    if state.polling:
        body["polling"] = True
    if state.reword_key is not None:
        body["reword_key"], body["reword_run"] = state.reword_key, state.reword_run
        body["reword_first"], body["reword_mixed"] = state.reword_first, state.reword_mixed
    if state.limits:
        body["limits"] = state.limits
    if state.retired:
        body["retired"] = True
    return _frame(_AGENT, agent, orjson.dumps(body))


def encode_guard(record: GuardRecord) -> bytes:
    body = {
        "paused": record.paused,
        "checks": record.checks,
        "denies": record.denies,
        "interrupts": record.interrupts,
        "warnings": record.warnings,
    }
    if record.overrides:
        body["overrides"] = record.overrides
    if record.trips:
        body["trips"] = record.trips
    return _frame(_GUARD, "", orjson.dumps(body))


def _header(seed: int | None) -> bytes:
    body = {"format": FORMAT, "version": VERSION, "hashseed": seed, "probe": digest_probe(), "created": time.time()}
    return _frame(_HEADER, "", orjson.dumps(body))


def _records(data: bytes | memoryview) -> Iterable[tuple[int, int, str, memoryview, int]]:
    """(offset, kind, id, body, end) for each whole record, stopping at the first torn or corrupt one."""
    view = memoryview(data)
    at = 0
    while at + _HEAD.size <= len(view):
        length, crc, kind, idlen = _HEAD.unpack_from(view, at)
        end = at + 8 + 3 + length
        if length > MAX_RECORD or end > len(view) or idlen > length:
            return
        rest = view[at + 8 : end]
        if zlib.crc32(rest) != crc:
            return
        ident = bytes(rest[3 : 3 + idlen]).decode("utf-8", "surrogatepass")
        yield at, kind, ident, rest[3 + idlen :], end
        at = end


def _decode_agent(agent: str, body: memoryview, notes: list[str] | None = None) -> AgentRecord:
    """An agent's record. A bad value in a field written since the first format (polls, wordings) costs only
    that field, which starts again as in a file without it: said in `notes`."""
    obj = orjson.loads(body)
    ring = array.array("q")
    ring.frombytes(base64.b64decode(obj["ring"]))
    if sys.byteorder != "little":  # pragma: no cover - written and read on the same machine in practice
        ring.byteswap()
    previews = {int(k): (str(tool), str(text)) for k, tool, text in obj.get("previews") or ()}
    denies = {str(k): int(v) for k, v in (obj.get("denies") or {}).items()}
    seen = obj.get("last_seen")
    state = AgentState(
        agent=agent,
        calls=int(obj["calls"]),
        denies=denies,
        ring=[None if k == _NONE else k for k in ring],
        previews=previews,
        last_tool=str(obj.get("last_tool") or ""),
        last_seen=float(seen) if isinstance(seen, (int, float)) else None,
        warns={str(k): int(v) for k, v in (obj.get("warns") or {}).items()},
        last=_last(obj.get("last")),
        last_key=int(obj["last_key"]) if obj.get("last_key") is not None else None,
        run=int(obj.get("run") or 0),
        cycles=[int(n) for n in obj["cycles"]] if obj.get("cycles") else None,
        recent=[None if k is None else int(k) for k in obj["recent"]] if obj.get("recent") else None,
        before={int(k): int(n) for k, n in obj["before"]} if obj.get("before") else None,
        results={int(k): int(d) for k, d in obj["results"]} if obj.get("results") else None,
        wrote=int(obj.get("wrote") or 0),
        alike={int(k): int(m) for k, m in obj["alike"]} if obj.get("alike") else None,
        tool_calls={str(k): int(v) for k, v in obj["tool_calls"].items()} if obj.get("tool_calls") else None,
        stall=_stall(obj.get("stall")),
        limits={str(k): int(v) for k, v in obj["limits"].items()} if obj.get("limits") else None,
        retired=obj.get("retired") is True,
        **_checked(agent, obj, notes),
    )
    parent = obj.get("parent")
    return AgentRecord(state, str(obj.get("harness") or ""), parent if isinstance(parent, str) else None)


_INT64 = range(-(2**63), 2**63)  # a digest: what hash() gives
_COUNT = range(2**63)
# Fields checked one by one, each with what it must hold: a bad one is left out with a note, never the agent.
_CHECKED: dict[str, tuple[Callable[[Any], bool], str, Any]] = {
    "polls": (lambda v: type(v) is int and v in _COUNT, "a count (an integer of 0 or more)", 0),
    "polling": (lambda v: type(v) is bool, "true or false", False),
    "reword_key": (lambda v: type(v) is int and v in _INT64, "a digest (a 64-bit integer)", None),
    "reword_run": (lambda v: type(v) is int and v in _COUNT, "a count (an integer of 0 or more)", 0),
    "reword_first": (
        lambda v: v is None or (type(v) is int and v in _INT64),
        "a digest (a 64-bit integer) or null",
        None,
    ),
    "reword_mixed": (lambda v: type(v) is bool, "true or false", False),
}
_REWORD = ("reword_key", "reword_run", "reword_first", "reword_mixed")  # one state: all of them or none


def _checked(agent: str, obj: dict[str, Any], notes: list[str] | None) -> dict[str, Any]:
    """The polls' and the reworded rule's state of an agent's record, each field as it must be. A field absent
    (a file from before they were kept) is its default; a bad one too, said in `notes` naming the agent and the
    field — a bad wording field drops the reworded rule's whole state (the run starts again), nothing else."""
    out: dict[str, Any] = {}
    for name, (good, expected, _default) in _CHECKED.items():
        if name not in obj:
            continue
        value = obj[name]
        if good(value):
            out[name] = value
        elif notes is not None:
            what = repr(value)
            what = what if len(what) <= 40 else what[:37] + "..."
            lost = "its wordings in a row start again" if name in _REWORD else f"it starts again at {_default!r}"
            notes.append(
                f"agent {agent!r}: {name} holds {what}, not {expected}: {lost} (the rest of its state is kept)"
            )
    if not all(name in out for name in _REWORD):
        for name in _REWORD:
            out.pop(name, None)
    return out


def _last(value: Any) -> tuple[Outcome, Kind] | None:
    """An agent's last outcome from its text on disk ("warn:<rule>", "deny:<kind>"; none: "" or absent)."""
    if not value:
        return None
    outcome, _, rule = str(value).partition(":")
    return cast(Outcome, outcome), cast(Kind, rule)


def _stall(value: Any) -> tuple[str, str | None, int] | None:
    if not value:
        return None
    tool, digest, n = value
    return str(tool), None if digest is None else str(digest), int(n)


def _decode_guard(body: memoryview) -> GuardRecord:
    obj = orjson.loads(body)
    interrupts = [
        (str(a), str(r), int(d), str(h or ""), p if isinstance(p, str) else None)
        for a, r, d, h, p in obj.get("interrupts") or ()
    ]
    denies = {str(k): int(v) for k, v in (obj.get("denies") or {}).items()}
    warnings = int(obj.get("warnings") or 0)
    overrides = {
        str(agent): {str(k): int(v) for k, v in limits.items()}
        for agent, limits in (obj.get("overrides") or {}).items()
    }
    trips = [
        (float(t), str(a), str(k), str(tool), int(n), int(limit)) for t, a, k, tool, n, limit in obj.get("trips") or ()
    ]
    return GuardRecord(
        bool(obj.get("paused")), int(obj.get("checks") or 0), denies, interrupts, warnings, overrides, trips
    )


def _last_spans(data: Any) -> list[tuple[int, int]]:
    """(start, end) of the last record of every agent still there, then of the last guard record."""
    last: dict[str, tuple[int, int]] = {}
    guard: tuple[int, int] | None = None
    for n, (at, kind, ident, _body, end) in enumerate(_records(data)):
        if kind == _AGENT:
            last.pop(ident, None)
            last[ident] = (at, end)
        elif kind == _GONE:
            last.pop(ident, None)
        elif kind == _GUARD:
            guard = (at, end)
        if n % 256 == 255:
            time.sleep(0)  # the event loop's thread gets the interpreter between slices
    return [*last.values(), *([guard] if guard is not None else [])]


# -- the file on disk ------------------------------------------------------------------------------


class StateLocked(RuntimeError):
    """Another guard holds the state file's lock: this one must not start on that file."""

    def __init__(self, path: Path, holder: str) -> None:
        who = f"pid {holder}" if holder.isdigit() else "a process whose pid is unknown"
        super().__init__(
            f"another guard keeps its state in {path} ({who} holds {lock_path(path).name}): two guards on one "
            "state file would lose each other's saves. Stop that guard, or give this one another state file "
            "with --state PATH (or --state none)"
        )
        self.path, self.holder = path, holder


class _Unusable(Exception):
    """What is at the state file's path is not a file the store may read (the message says what it is)."""


def lock_path(path: Path) -> Path:
    """The lock file beside a state file: `<name>.lock`, holding the pid of the guard that holds it."""
    return path.with_name(path.name + ".lock")


def _what(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "a special file"


def _open_state(path: Path, flags: int, max_bytes: int) -> int | None:
    """A descriptor on the regular file at `path` opened with `flags` (None: nothing is there), never
    through a symlink and never blocking on a FIFO. Raises _Unusable naming what is there instead (a
    symlink, a FIFO, a device, a directory, a file over `max_bytes`), OSError if it cannot be opened."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "somewhere"
        raise _Unusable(
            f"is a symlink (to {target}): the guard never reads or writes its state through a symlink "
            "(to keep it in another file, name that file with --state)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise _Unusable(f"is {_what(st.st_mode)}, not a regular file")
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)  # what was opened, should the path have changed since
        if not stat.S_ISREG(st.st_mode):
            raise _Unusable(f"is {_what(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise _Unusable(f"is {st.st_size:,} bytes, over the {max_bytes:,} bytes a state file may hold (not read)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(fd: int) -> bytes:
    """The whole of an open state file (its size already bounded by `_open_state`)."""
    size = os.fstat(fd).st_size
    with open(fd, "rb", closefd=False) as f:
        f.seek(0)
        return f.read(size)


def _set_aside(path: Path) -> Path:
    """Rename whatever is at `path` (a file, a FIFO, a symlink: only the name moves) to `<name>.bad-<time>`,
    never over an earlier one."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    n = 1
    while True:
        aside = path.with_name(f"{path.name}.bad-{stamp}" + (f"-{n}" if n > 1 else ""))
        if not os.path.lexists(aside):
            os.rename(path, aside)
            return aside
        n += 1


def read_hash_seed(path: Path) -> int | None:
    """The hash seed a state file's windows were made with (None: no usable file). Cheap: the header only."""
    try:
        fd = _open_state(path, os.O_RDONLY, MAX_STATE_BYTES)
    except (OSError, _Unusable):
        return None
    if fd is None:
        return None
    try:
        head = os.pread(fd, 4096, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    for _at, kind, _ident, body, _end in _records(head):
        if kind != _HEADER:
            return None
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        seed = obj.get("hashseed") if obj.get("format") == FORMAT else None
        return seed if type(seed) is int and 0 <= seed <= 4294967295 else None
    return None


def load(path: Path, max_bytes: int = MAX_STATE_BYTES) -> tuple[SavedState, int]:
    """Read a state file. Returns what it holds and the byte length of its whole records (a torn
    tail past it is to be cut). Never raises for bad content: `problem` says why it was not used."""
    try:
        fd = _open_state(path, os.O_RDONLY, max_bytes)
        if fd is None:
            return SavedState(), 0
        try:
            data = _read(fd)
        finally:
            os.close(fd)
    except _Unusable as exc:
        return SavedState(problem=f"the state file {path} {exc}"), 0
    except OSError as exc:
        return SavedState(problem=f"cannot read the state file {path}: {exc.strerror or exc}"), 0
    return _parse(data, path)


def _parse(data: bytes, path: Path) -> tuple[SavedState, int]:
    out = SavedState()
    agents: dict[str, AgentRecord | None] = {}
    said: dict[str, list[str]] = {}  # agent -> what its record held that could not be used
    good = 0
    first = True
    try:
        for _at, kind, ident, body, end in _records(data):
            if first:
                header = orjson.loads(body) if kind == _HEADER else None
                if not isinstance(header, dict) or header.get("format") != FORMAT:
                    out.problem = f"{path} is not a cbconsole state file"
                    return out, 0
                if header.get("version") != VERSION:
                    out.problem = f"{path} is a state file of format version {header.get('version')!r}, not {VERSION}"
                    return out, 0
                if header.get("probe") != digest_probe():
                    out.windows = False
                    out.notes.append(
                        f"the windows in {path} were made with another hash seed: agents keep their calls, "
                        "denies and interrupts, not their windows"
                    )
                first = False
            elif kind == _AGENT:
                agents.pop(ident, None)  # re-inserted last: the order of the file is the order of activity
                said[ident] = []  # only what its last record holds is worth saying
                agents[ident] = _decode_agent(ident, body, said[ident])
            elif kind == _GONE:
                agents.pop(ident, None)
            elif kind == _GUARD:
                out.guard = _decode_guard(body)
            good = end
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
        out.problem = f"{path} holds a record that cannot be read ({type(exc).__name__}: {exc}); not used"
        out.agents, out.guard = [], None
        return out, 0
    if first and data:
        out.problem = f"{path} is not a cbconsole state file (no header)"
        return out, 0
    if good < len(data):
        out.notes.append(
            f"{path} ended in a torn or corrupt record ({len(data) - good} bytes after byte {good} dropped: "
            "a crash mid-write loses at most that save)"
        )
    out.agents = [r for r in agents.values() if r is not None]
    out.notes.extend(f"{path}: {note}" for agent in agents for note in said.get(agent, ()))
    return out, good


# -- the store --------------------------------------------------------------------------------------


class StateStore:
    """The state file and the thread that writes it. `save(records, done)` queues encoded work; the
    thread appends, fsyncs, compacts when due, then calls `done()` (from the thread).

    `max_bytes` is the largest file it reads or writes (MAX_STATE_BYTES unless given)."""

    def __init__(
        self,
        path: Path,
        seed: int | None,
        on_error: Callable[[str], Any] | None = None,
        *,
        max_bytes: int = MAX_STATE_BYTES,
    ) -> None:
        self.path = path
        self.seed = seed
        self.on_error = on_error
        self.max_bytes = max_bytes
        self.error: str | None = None
        self.size = 0
        self.compact_min = COMPACT_MIN  # never compact a file smaller than this
        self._weight = 0  # what the last records weighed when last measured: the next compaction is due at 4x
        self._fd: int | None = None  # the file, read-write, appending; the same inode from open to close
        self._lock_fd: int | None = None
        self._writer: QueueWorker[tuple[list[Any], Callable[[], Any] | None]] | None = None
        self.saves = 0

    # -- start ----------------------------------------------------------------------------------

    def open(self) -> SavedState:
        """Take the file's lock, read the file (setting an unusable one aside), cut a torn tail, start the
        writer. Raises StateLocked if another guard holds the lock; never raises for what the file holds.
        An unusable directory leaves the store off with `error` saying why."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._lock()
        except OSError as exc:
            # No lock, no writing; what the file holds is still put back.
            self._fail(f"cannot keep state in {self.path}: {exc.strerror or exc}; the guard will forget on restart")
            return load(self.path, self.max_bytes)[0]
        try:
            loaded = self._load()
        except OSError as exc:
            self._fail(f"cannot keep state in {self.path}: {exc.strerror or exc}; the guard will forget on restart")
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._unlock()
            return load(self.path, self.max_bytes)[0]  # what it holds is still put back
        if self._fd is None:  # read, but not writable
            self._unlock()
            return loaded
        self._writer = QueueWorker("state-writer", self._write)  # all that waits goes out with one fsync
        return loaded

    def _lock(self) -> None:
        """Hold `<name>.lock` for the store's life (the kernel lets it go if the process dies), our pid in it."""
        path = lock_path(self.path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{path} is not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            raise StateLocked(self.path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing lets the flock go
            self._lock_fd = None

    def _load(self) -> SavedState:
        """Read the file through the descriptor the writer will append to; set aside what cannot be used."""
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()  # a compaction a crash interrupted
        fd: int | None = None
        loaded, good = SavedState(), 0
        try:
            fd = _open_state(self.path, os.O_RDWR, self.max_bytes)
        except _Unusable as exc:
            loaded.problem = f"the state file {self.path} {exc}"
        except PermissionError as exc:  # e.g. left by a guard run as root: put back what it holds, write nothing
            loaded = load(self.path, self.max_bytes)[0]
            self._fail(f"cannot write the state file {self.path}: {exc.strerror}; the guard will forget on restart")
            return loaded
        except OSError as exc:
            loaded.problem = f"cannot read the state file {self.path}: {exc.strerror or exc}"
        try:
            if fd is not None:
                loaded, good = _parse(_read(fd), self.path)
            if loaded.problem is not None and os.path.lexists(self.path):
                if fd is not None:
                    os.close(fd)
                    fd = None
                aside = _set_aside(self.path)
                loaded.notes.append(f"{loaded.problem}: set aside as {aside.name}; the guard starts clean")
                good = 0
            if good == 0:
                self._rewrite([])  # a fresh file with this process's header
            else:
                assert fd is not None
                os.ftruncate(fd, good)
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
                self._fd, fd = fd, None
                self.size = good
                if not loaded.windows:
                    self._rewrite(self._live_records())  # from now on, this process's digests
        finally:
            if fd is not None:
                os.close(fd)
        return loaded

    @property
    def running(self) -> bool:
        return self._writer is not None

    def _fail(self, message: str) -> None:
        if message != self.error:
            log.warning("%s", message)
            if self.on_error is not None:
                with contextlib.suppress(Exception):
                    self.on_error(message)
        self.error = message

    # -- writing ------------------------------------------------------------------------------------

    def save(self, items: list[Any], done: Callable[[], Any] | None = None) -> None:
        """Queue records to write: `(agent, AgentState | None, harness, parent)` tuples and
        GuardRecords, encoded on the writer thread. `done()` runs there once they are on disk."""
        if self._writer is None:
            if done is not None:
                done()
            return
        self._writer.put((items, done))

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the thread and let the lock go."""
        if self._writer is not None:
            self._writer.close(timeout)
            self._writer = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._unlock()

    def _write(self, batch: list[tuple[list[Any], Callable[[], Any] | None]]) -> None:
        chunks: list[bytes] = []
        guards: list[bytes] = []
        for items, _done in batch:
            for n, item in enumerate(items):
                if isinstance(item, GuardRecord):
                    guards.append(encode_guard(item))
                else:
                    chunks.append(encode_agent(*item))
                if n % 64 == 63:
                    time.sleep(0)  # let the event loop's thread have the interpreter between slices
        data = b"".join([*chunks, *guards])
        try:
            if self._fd is None:
                raise OSError("the state file is not open")
            over = None
            if self.size + len(data) > self.max_bytes:
                self._compact()  # before the file would pass its limit
                if self.size + len(data) > self.max_bytes:
                    over = (
                        f"the guard's state no longer fits the state file {self.path} ({self.max_bytes:,} bytes at "
                        "most): agents' changes are not saved, interrupts and the pause are (lower maxAgents or window)"
                    )
                    data = b"".join(guards)
                    if self.size + len(data) > self.max_bytes:
                        data = b""
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
            self.size += len(data)
            self.saves += 1
            if over is not None:
                self._fail(over)
            elif self.error is not None:
                log.info("state file %s is written again", self.path)
                self.error = None
            if self.size > self.compact_min and self.size >= COMPACT_RATIO * self._weight:
                self._maybe_compact()
        except OSError as exc:
            self._fail(f"cannot write the state file {self.path}: {exc.strerror or exc}")
        for _items, done in batch:
            if done is not None:
                with contextlib.suppress(Exception):
                    done()

    def _live_records(self) -> list[bytes]:
        """The last record of every agent still there, and the last guard record, in file order.

        The file is mapped, not read: only the records kept are copied, so a compaction costs the
        guard what the agents weigh, not what the file grew to."""
        if self._fd is None or os.fstat(self._fd).st_size == 0:
            return []
        data = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
        try:
            spans = _last_spans(data)  # its memoryviews into the map are gone when it returns
            return [data[at:end] for at, end in spans]
        finally:
            data.close()

    def _maybe_compact(self) -> None:
        live = self._live_records()
        self._weight = sum(map(len, live))
        if self.size >= COMPACT_RATIO * self._weight:
            self._rewrite(live)
            log.info("state file %s compacted to %d bytes (%d records)", self.path, self.size, len(live))

    def _compact(self) -> None:
        live = self._live_records()
        self._weight = sum(map(len, live))
        self._rewrite(live)
        log.info("state file %s compacted to %d bytes before reaching its limit", self.path, self.size)

    def _rewrite(self, records: list[bytes]) -> None:
        """Replace the file with a header and `records` (temp file, fsync, rename, fsync the directory), and
        append to the new one from now on. The rename replaces whatever is at the path (a symlink put there
        is replaced, never followed); the temporary file is new (O_EXCL)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            for record in [_header(self.seed), *records]:
                view = memoryview(record)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self.size = os.fstat(fd).st_size
        with contextlib.suppress(OSError):
            dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
