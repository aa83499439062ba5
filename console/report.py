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
from console.state import ConsoleState

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
    agent most dangerous first, the top repeated calls and the trips it kept."""
    stats = state.stats
    return {
        "saved_at": saved_at.isoformat(timespec="seconds"),
        "console_version": __version__,
        "guard": {
            "socket": stats.socket if stats else None,
            "operator_socket": stats.operator_socket if stats else None,
            "pid": stats.pid if stats else None,
            "status": state.guard_status,
            "note": state.guard_note,
        },
        "stats": stats.to_json() if stats else None,
        "config": state.config.to_json(),
        "selected": selected,
        "marked": sorted(state.marked),
        "filter": state.filter,
        "agents": [a.data.to_json() for a in sorted(state.agents.values(), key=lambda a: a.danger)],
        "top_keys": [k.to_json() for k in state.top_keys],
        "trips_seen": state.trips_seen,
        "trips": [t.to_json() for t in state.trips],
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
    write_atomic(json_path, orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    write_atomic(svg_path, svg.encode("utf-8"))
    return SavedReport(json_path, svg_path)
