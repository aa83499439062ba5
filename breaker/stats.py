"""The guard's stats (`GuardStats`) and their one writer, which reads most of them from the parts that know them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from breaker.channel import Channel
from breaker.engine import Guard
from breaker.protocol import GuardStats

__all__ = ["CommandsPart", "IncidentsPart", "OutputsPart", "StatePart", "StatsBoard"]


class IncidentsPart(Protocol):
    """The incident log, as the stats read it (breaker.incidents.QueuedIncidentLog)."""

    @property
    def path(self) -> str: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def dropped(self) -> int: ...


class CommandsPart(Protocol):
    """The interrupt commands (breaker.commands.InterruptCommands)."""

    @property
    def dropped(self) -> int: ...


class StatePart(Protocol):
    """The state file (breaker.keeper.StateKeeper)."""

    @property
    def state_file(self) -> str: ...
    @property
    def state_error(self) -> str | None: ...


class OutputsPart(Protocol):
    """The metrics server and the OpenTelemetry export (breaker.outputs.Outputs)."""

    @property
    def metrics_url(self) -> str: ...
    @property
    def metrics_error(self) -> str | None: ...
    @property
    def otel_on(self) -> bool: ...
    @property
    def otel_error(self) -> str | None: ...


class StatsBoard:
    """Builds the guard's `GuardStats` whenever they are asked for. Nobody else writes a field: the session
    counts what only it sees (`frames_too_large`, `events_dropped`), the transport says once where the
    guard listens and attaches the parts (incident log, interrupt commands, state file, outputs), and
    each read takes their figures as they are then."""

    def __init__(self, pid: int = 0, started: float = 0.0) -> None:
        self.pid = pid
        self.started = started
        self.host = ""
        self.socket = ""
        self.operator_socket = ""
        self.frames_too_large = 0
        self.events_dropped = 0  # interrupt pushes to connections that read nothing
        self.incidents: IncidentsPart | None = None
        self.commands: CommandsPart | None = None
        self.state: StatePart | None = None
        self.outputs: OutputsPart | None = None

    def current(self, guard: Guard, channels: Iterable[Channel], now: float) -> GuardStats:
        """The stats as they are at `now` (wall time)."""
        harnesses: dict[str, int] = {}
        connections = 0
        for ch in channels:
            connections += 1
            if ch.is_harness:
                name = ch.harness or "unknown"
                harnesses[name] = harnesses.get(name, 0) + 1
        incidents, state, outputs = self.incidents, self.state, self.outputs
        return GuardStats(
            checks=guard.checks,
            denies=dict(guard.denies),
            warnings=guard.warnings,
            agents=len(guard),
            connections=connections,
            harnesses=harnesses,
            paused=guard.paused,
            uptime=now - self.started,
            pid=self.pid,
            host=self.host,
            socket=self.socket,
            operator_socket=self.operator_socket,
            incident_log=incidents.path if incidents is not None else "",
            incident_log_error=incidents.last_error if incidents is not None else None,
            incidents_dropped=incidents.dropped if incidents is not None else 0,
            frames_too_large=self.frames_too_large,
            events_dropped=self.events_dropped,
            commands_dropped=self.commands.dropped if self.commands is not None else 0,
            state_file=state.state_file if state is not None else "",
            state_error=state.state_error if state is not None else None,
            metrics=outputs.metrics_url if outputs is not None else "",
            metrics_error=outputs.metrics_error if outputs is not None else None,
            otel_events=outputs.otel_on if outputs is not None else False,
            otel_error=outputs.otel_error if outputs is not None else None,
        )

    def signature(self, guard: Guard, connections: int) -> tuple[Any, ...]:
        """What a console's header shows, cheaply: a change here is worth a frame even if no agent changed."""
        return (
            guard.checks,
            tuple(guard.denies.values()),
            guard.warnings,
            guard.paused,
            connections,
            self.incidents.last_error if self.incidents is not None else None,
            self.state.state_error if self.state is not None else None,
        )
