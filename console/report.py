"""Incident reports: the console's state as JSON beside a screenshot of the screen, written privately and atomically.

No Textual here: the screen hands over the screenshot's SVG text; this module owns what the JSON holds and
where the two files go.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from breaker import __version__
from breaker.paths import write_atomic
from console.inert import inert_json
from console.state import ConsoleGuard, ConsoleState

__all__ = ["SavedReport", "report_json", "reports_dir", "save_report"]

PREFIX = "cbconsole-"


@dataclass(frozen=True, slots=True)
class SavedReport:
    """The two files one save wrote."""

    json: Path
    svg: Path


def reports_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`$XDG_STATE_HOME/cbconsole/reports`, `~/.local/state/…` when the variable is unset or empty. Not the
    current directory: a report quotes agents' calls, so it goes where only its owner can read it."""
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "cbconsole" / "reports"


def report_json(state: ConsoleState, saved_at: datetime, selected: str | None = None) -> dict[str, Any]:
    """What the console knows now: the guard (where, which process, its counters), the config in force, every
    agent most dangerous first, the top repeated calls and the trips it kept. Over several guards: the same of
    each guard under `guards`, and each agent, call and trip says its guard (`guard`, its label)."""
    if state.fleet:
        return _fleet_report(state, saved_at, selected)
    guard = _guard_json(state.guards[0])
    return {
        "saved_at": saved_at.isoformat(timespec="seconds"),
        "console_version": __version__,
        "guard": {k: guard[k] for k in ("socket", "operator_socket", "pid", "status", "note")},
        "stats": guard["stats"],
        "config": guard["config"],
        "selected": selected,
        "marked": sorted(state.marked),
        "filter": state.filter,
        "agents": [a.data.to_json() for a in sorted(state.agents.values(), key=lambda a: a.danger)],
        "top_keys": [k.to_json() for k in state.top_keys],
        "trips_seen": state.trips_seen,
        "trips": [t.to_json() for t in state.trips],
    }


def _guard_json(view: ConsoleGuard) -> dict[str, Any]:
    stats = view.stats
    return {
        "label": view.label,
        "socket": stats.socket if stats else None,
        "operator_socket": stats.operator_socket if stats else None,
        "pid": stats.pid if stats else None,
        "host": stats.host if stats else None,
        "status": view.status,
        "note": view.note,
        "stats": stats.to_json() if stats else None,
        "config": view.config.to_json(),
    }


def _fleet_report(state: ConsoleState, saved_at: datetime, selected: str | None) -> dict[str, Any]:
    def labelled(row: dict[str, Any], key: str) -> dict[str, Any]:
        guard, agent = state.split_key(key)
        return {**row, "agent": agent, "guard": state.guards[guard].label}

    return {
        "saved_at": saved_at.isoformat(timespec="seconds"),
        "console_version": __version__,
        "guards": [_guard_json(view) for view in state.guards],
        "selected": state.name_of(selected) if selected else None,
        "marked": sorted(state.name_of(a) for a in state.marked),
        "filter": state.filter,
        "agents": [labelled(a.data.to_json(), a.key) for a in sorted(state.agents.values(), key=lambda a: a.danger)],
        "top_keys": [labelled(k.to_json(), k.agent) for k in state.top_keys],
        "trips_seen": state.trips_seen,
        "trips": [labelled(t.to_json(), t.agent) for t in state.trips],
    }


def save_report(directory: Path, report: dict[str, Any], svg: str, saved_at: datetime) -> SavedReport:
    """Write `cbconsole-YYYYMMDD-HHMMSS.json` and `.svg` into `directory` (created 0700), each 0600 and atomic;
    a second save in the same second gets `-2`, `-3`… Raises OSError, with the path in it, if either fails."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    stem = PREFIX + saved_at.strftime("%Y%m%d-%H%M%S")
    n = 1
    while (directory / f"{stem}.json").exists() or (directory / f"{stem}.svg").exists():
        n += 1
        stem = PREFIX + saved_at.strftime("%Y%m%d-%H%M%S") + f"-{n}"
    json_path, svg_path = directory / f"{stem}.json", directory / f"{stem}.svg"
    # The data as it is, with every control and invisible format character a \\u escape: inert in a terminal.
    write_atomic(json_path, inert_json(orjson.dumps(report, option=orjson.OPT_INDENT_2)) + b"\n")
    write_atomic(svg_path, svg.encode("utf-8"))
    return SavedReport(json_path, svg_path)
