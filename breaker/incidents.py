"""The incident log: one JSONL line per agent for its first deny of each kind. Writes fail open."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from breaker.worker import QueueWorker

__all__ = ["IncidentLog", "QueuedIncidentLog", "incident_line"]

_FIELD_MAX = 4096  # a pathological tool name or agent id must not make a multi-megabyte line


def incident_line(kind: str, tool: str, count: int, limit: int, agent: str, when: float) -> bytes:
    """The seed's exact line shape, keys in its order, `time` in UTC with a `Z`."""
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
        "kind": kind,
        "tool": _clip(tool),
        "count": count,
        "limit": limit,
        "agent": _clip(agent),
    }
    return orjson.dumps(record) + b"\n"


def _clip(text: str) -> str:
    return text if len(text) <= _FIELD_MAX else text[: _FIELD_MAX - 1] + "…"


class IncidentLog:
    """Appends incident lines to a path ("" = off).

    Each line goes out in one `write()` on an `O_APPEND` descriptor, so lines from concurrent
    writers (several guards, several processes) never interleave. Any OSError is swallowed and
    remembered in `last_error` (and passed to `on_error`): a bad path or a full disk must never
    change a decision.
    """

    def __init__(self, path: str | os.PathLike[str] = "", on_error: Callable[[str], Any] | None = None) -> None:
        self.path = os.fspath(path)
        self.on_error = on_error
        self.last_error: str | None = None
        self.written = 0
        self.failed = 0

    @property
    def enabled(self) -> bool:
        return bool(self.path)

    def record(self, *, kind: str, tool: str, count: int, limit: int, agent: str, when: float | None = None) -> bool:
        """Append one incident; True if it reached the file."""
        if not self.path:
            return False
        try:
            line = incident_line(kind, tool, count, limit, agent, time.time() if when is None else when)
            # O_NONBLOCK: a FIFO with no reader fails at once (ENXIO) instead of blocking; no effect on files
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(os.path.expanduser(self.path), flags, 0o600)
            try:
                view = memoryview(line)
                while view:  # a short write only happens on a full disk; finish or fail
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except Exception as exc:  # OSError above all; nothing here may reach the caller
            self.failed += 1
            message = f"incident log {self.path!r}: {exc}"
            first = message != self.last_error
            self.last_error = message
            if first and self.on_error is not None:
                try:
                    self.on_error(message)
                except Exception:
                    pass
            return False
        self.written += 1
        self.last_error = None
        return True

    def record_verdict(self, agent: str, tool: str, verdict: Any, when: float | None = None) -> bool:
        """Log a verdict if it is the agent's first deny of its kind (`verdict.first`)."""
        if verdict.allowed or not verdict.first:
            return False
        return self.record(
            kind=verdict.kind, tool=tool, count=verdict.count, limit=verdict.limit, agent=agent, when=when
        )


class QueuedIncidentLog:
    """An IncidentLog written by a thread of its own (a QueueWorker), so a path that blocks (a FIFO nobody
    reads, a hung network mount) never holds up a decision. The queue is bounded: when it is full, lines
    are dropped and counted (`dropped`), and the first drop of each stretch is reported."""

    def __init__(
        self, path: str | os.PathLike[str] = "", on_error: Callable[[str], Any] | None = None, size: int = 10_000
    ):
        self.log = IncidentLog(path, on_error=on_error)
        self._path = self.log.path
        self.on_error = on_error
        self._full = False
        self.worker: QueueWorker[tuple[str, dict[str, Any]]] = QueueWorker("incident-log", self._write, limit=size)

    @property
    def path(self) -> str:
        return self._path

    @path.setter
    def path(self, value: str) -> None:
        self._path = os.fspath(value)  # lines already queued keep the path they were recorded under

    @property
    def last_error(self) -> str | None:
        return self.log.last_error

    @property
    def dropped(self) -> int:
        """Lines the queue had no room for."""
        return self.worker.dropped

    def record(self, *, kind: str, tool: str, count: int, limit: int, agent: str, when: float | None = None) -> bool:
        """Queue one incident; False if the queue was full (the line is dropped and counted)."""
        if not self._path:
            return False
        fields = {"kind": kind, "tool": tool, "count": count, "limit": limit, "agent": agent, "when": when}
        if not self.worker.put((self._path, fields)):
            if not self._full and self.on_error is not None:
                self._full = True
                try:
                    self.on_error(
                        f"incident log {self.log.path!r} is not keeping up ({self.worker.limit:,} lines waiting): "
                        "dropping lines until it does"
                    )
                except Exception:
                    pass
            return False
        self._full = False
        return True

    def _write(self, lines: list[tuple[str, dict[str, Any]]]) -> None:
        for self.log.path, fields in lines:
            self.log.record(**fields)

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued (waiting at most `timeout` s: a blocked path is given up on)."""
        self.worker.close(timeout)
