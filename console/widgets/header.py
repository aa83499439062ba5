"""The guard's state at a glance: status, socket, harnesses, checks/s, trips and denies, the config in force."""

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
        stats, config = state.stats or GuardStats(), state.config
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
        line2.append("   agents ", style=colors["muted"])
        line2.append(str(len(state.agents)))
        line2.append("   ")
        line2.append(f"{state.checks_per_s:,.0f} checks/s", style="bold")
        line2.append("   checks ", style=colors["muted"])
        line2.append(f"{stats.checks:,}")
        # Two numbers, two words: a trip is an agent's first deny of a kind (the trips list); denies
        # counts every denied call, by kind.
        line2.append("   trips ", style=colors["muted"])
        line2.append(str(state.trips_seen), style=f"bold {colors['trip']}" if state.trips_seen else "")
        line2.append("   denies ", style=colors["muted"])
        line2.append(f"{sum(stats.denies.values()):,}")
        if stats.denies:
            line2.append(" (", style=colors["muted"])
            for i, (kind, count) in enumerate(stats.denies.items()):
                line2.append(" · " if i else "", style=colors["muted"])
                line2.append_text(plain(kind, style=colors["muted"]))
                line2.append(f" {count:,}", style=colors["muted"])
            line2.append(")", style=colors["muted"])

        line3 = Text(no_wrap=True, overflow="ellipsis")
        settings = state.settings
        if config.error:
            line3.append("config error, last good kept: ", style=f"bold {colors['trip']}")
            line3.append_text(plain(config.error, style=colors["trip"]))
        elif settings is not None:
            line3.append("config ", style=colors["muted"])
            if not settings.enabled or config.disabled:
                line3.append("GUARD DISABLED ", style=f"bold {colors['trip']}")
            line3.append(f"duplicateLimit {settings.duplicate_limit}", style="bold")
            line3.append(f" · window {settings.window}")
            line3.append(f" · maxCallsPerAgent {settings.max_calls_per_agent or 'off'}")
            line3.append(" · exempt ", style=colors["muted"])
            line3.append_text(plain(", ".join(settings.exempt) or "none", style=colors["exempt"]))
            if settings.only:
                line3.append(" · only ", style=colors["muted"])
                line3.append_text(plain(", ".join(settings.only)))
        elif state.settings_error:
            line3.append("config: the guard's values do not read here: ", style=f"bold {colors['trip']}")
            line3.append_text(plain(state.settings_error, style=colors["trip"]))
        else:
            line3.append("config: waiting for the guard", style="dim")
        text = Text("\n").join([line, line2, line3])
        text.no_wrap, text.overflow = True, "ellipsis"
        self.update(text)
