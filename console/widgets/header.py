"""The guard's state at a glance: status, socket, harnesses, config in force, checks/s, trips."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from breaker.protocol import GuardStats
from console.state import ConsoleState
from console.widgets.cells import plain

__all__ = ["GuardHeader"]


class GuardHeader(Static):
    DEFAULT_CSS = """
    GuardHeader { height: 3; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, state: ConsoleState, colors: Mapping[str, str], readonly: bool, frozen: bool) -> None:
        stats, values, config = state.stats or GuardStats(), state.values, state.config
        status_role = {"running": "ok", "attached": "ok", "restarting": "warn", "starting": "warn"}.get(
            state.guard_status, "trip"
        )
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("● ", style=colors[status_role])
        line.append(f"guard {state.guard_status}", style=f"bold {colors[status_role]}")
        if stats.pid:
            line.append(f" (pid {stats.pid})", style=colors["muted"])
        if config.source:
            line.append("   config from ", style=colors["muted"])
            line.append_text(plain(config.source, style=colors["muted"]))
        if state.guard_note:
            line.append("  ")
            line.append_text(plain(state.guard_note, style=colors["warn"]))
        if stats.paused:
            line.append("  GUARD PAUSED: every call allowed", style=f"bold reverse {colors['warn']}")
        if frozen:
            line.append("  screen frozen (z)", style=f"bold {colors['warn']}")
        if readonly:
            line.append("  read-only", style=colors["muted"])
        line.append("   socket ", style=colors["muted"])
        line.append_text(plain(stats.socket))

        line2 = Text(no_wrap=True, overflow="ellipsis")
        harnesses = stats.harnesses
        line2.append("harnesses ", style=colors["muted"])
        if harnesses:
            for i, (name, n) in enumerate(sorted(harnesses.items())):
                if i:
                    line2.append(", ")
                line2.append_text(plain(name))
                line2.append(f" {n}")
        else:
            line2.append("none", style="dim")
        denies = stats.denies
        line2.append("   agents ", style=colors["muted"])
        line2.append(str(len(state.agents)))
        line2.append("   ")
        line2.append(f"{state.checks_per_s:,.0f} checks/s", style="bold")
        line2.append("   checks ", style=colors["muted"])
        line2.append(f"{stats.checks:,}")
        line2.append("   trips ", style=colors["muted"])
        line2.append(str(state.trips_seen), style=f"bold {colors['trip']}" if state.trips_seen else "")
        line2.append(
            f"   denied: dup {denies.get('duplicate', 0):,} · cap {denies.get('cap', 0):,} · "
            f"int {denies.get('interrupted', 0):,}",
            style=colors["muted"],
        )

        line3 = Text(no_wrap=True, overflow="ellipsis")
        if config.error:
            line3.append("config error, last good kept: ", style=f"bold {colors['trip']}")
            line3.append_text(plain(config.error, style=colors["trip"]))
        elif values:
            enabled = values.get("enabled", True) and not config.disabled
            line3.append("config ", style=colors["muted"])
            if not enabled:
                line3.append("GUARD DISABLED ", style=f"bold {colors['trip']}")
            line3.append(f"duplicateLimit {values.get('duplicateLimit')}", style="bold")
            line3.append(f" · window {values.get('window')}")
            cap = values.get("maxCallsPerAgent")
            line3.append(f" · maxCallsPerAgent {cap if cap else 'off'}")
            line3.append(" · exempt ", style=colors["muted"])
            line3.append_text(plain(", ".join(values.get("exempt") or []) or "none", style=colors["exempt"]))
            if values.get("only"):
                line3.append(" · only ", style=colors["muted"])
                line3.append_text(plain(", ".join(values["only"])))
        else:
            line3.append("config: waiting for the guard", style="dim")
        text = Text("\n").join([line, line2, line3])
        text.no_wrap, text.overflow = True, "ellipsis"
        self.update(text)
