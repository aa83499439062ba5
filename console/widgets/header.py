"""The guard at a glance: status, socket, harnesses, checks/s, trips, denies and warnings, the config in force."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from breaker.config import KEYS, SETTINGS
from breaker.protocol import GuardStats
from console.state import ConsoleGuard, ConsoleState
from console.widgets.cells import by_kind, plain

__all__ = ["GuardHeader"]

# The limits of the rules beyond the seed's duplicate rule (repeatLimit, cycleLimit, …): 0 = off.
_OTHER_LIMITS = tuple(
    s.key for s in SETTINGS if s.kind == "int" and s.key.endswith("Limit") and s.key != "duplicateLimit"
)

# (the harnesses' names, the checks' total, the denies' split by kind) in the counts line, fullest first.
_NARROWER = ((True, True, True), (True, True, False), (True, False, False), (False, False, False))
_STATUS_ROLE = {"running": "ok", "attached": "ok", "restarting": "warn", "starting": "warn"}


def summed(views: list[ConsoleGuard]) -> GuardStats:
    """Several guards' counters as one: what the counts line says over several guards."""
    out = GuardStats()
    for view in views:
        stats = view.stats
        if stats is None:
            continue
        out.checks += stats.checks
        out.warnings += stats.warnings
        for kind, n in stats.denies.items():
            out.denies[kind] = out.denies.get(kind, 0) + n
        for name, n in stats.harnesses.items():
            out.harnesses[name] = out.harnesses.get(name, 0) + n
    return out


class GuardHeader(Static):
    DEFAULT_CSS = """
    GuardHeader { height: 3; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    # what show() was last given
    _shown: tuple[ConsoleState, Mapping[str, str], bool, bool, ConsoleGuard | None] | None = None

    def show(
        self,
        state: ConsoleState,
        colors: Mapping[str, str],
        readonly: bool,
        frozen: bool,
        view: ConsoleGuard | None = None,
    ) -> None:
        """The guard's status, counts and config; over several guards each one's status, every guard's counts, and
        the config of `view` (the selected agent's guard)."""
        view = view or state.guards[0]
        config = view.config
        if state.fleet:
            line = self._guards_line(state, colors)
            stats = summed(state.guards)
        else:
            stats = view.stats or GuardStats()
            line = self._guard_line(view, stats, colors)
        if frozen:
            line.append("  screen frozen (z)", style=f"bold {colors['warn']}")
        if readonly:
            line.append("  read-only", style=colors["muted"])
        if not state.fleet:
            if view.note:
                line.append("  ")
                line.append_text(plain(view.note, style=colors["warn"]))
            if config.source:
                line.append("   config from ", style=colors["muted"])
                line.append_text(plain(config.source, style=colors["muted"]))
            if stats.socket:  # none before a guard answered: the note names the path tried
                line.append("   socket ", style=colors["muted"])
                line.append_text(plain(stats.socket))

        # The counts line, fullest first, each variant narrower: the first that fits the width is shown.
        width = self.content_size.width
        for harness_list, total, split in _NARROWER:
            line2 = self._counts(state, stats, colors, harness_list=harness_list, total=total, split=split)
            if not width or line2.cell_len <= width:
                break

        line3 = Text(no_wrap=True, overflow="ellipsis")
        settings = view.settings
        if state.fleet:
            line3.append_text(plain(view.label, style="bold"))
            line3.append(": ", style=colors["muted"])
        if config.error:
            line3.append("config error, last good kept: ", style=f"bold {colors['trip']}")
            line3.append_text(plain(config.error, style=colors["trip"]))
        elif settings is not None:
            line3.append("config ", style=colors["muted"])
            if not settings.enabled or config.disabled:
                line3.append("GUARD DISABLED ", style=f"bold {colors['trip']}")
            line3.append("preset ", style=colors["muted"])
            line3.append(settings.preset)
            line3.append(" · ", style=colors["muted"])
            line3.append(f"duplicateLimit {settings.duplicate_limit}", style="bold")
            for key in _OTHER_LIMITS:  # the rules beyond the seed's, when they are on
                value = getattr(settings, KEYS[key])
                if value:
                    line3.append(f" · {key} {value}", style="bold")
            line3.append(f" · window {settings.window}")
            line3.append(f" · maxCallsPerAgent {settings.max_calls_per_agent or 'off'}")
            line3.append(" · exempt ", style=colors["muted"])
            line3.append_text(plain(", ".join(settings.exempt) or "none", style=colors["exempt"]))
            if settings.only:
                line3.append(" · only ", style=colors["muted"])
                line3.append_text(plain(", ".join(settings.only)))
            if settings.tools:
                line3.append(" · tools ", style=colors["muted"])
                line3.append_text(plain(", ".join(tool for tool, _ in settings.tools)))
        elif view.settings_error:
            line3.append("config: the guard's values do not read here: ", style=f"bold {colors['trip']}")
            line3.append_text(plain(view.settings_error, style=colors["trip"]))
        else:
            line3.append("config: waiting for the guard", style="dim")
        text = Text("\n").join([line, line2, line3])
        text.no_wrap, text.overflow = True, "ellipsis"
        self._shown = (state, colors, readonly, frozen, view)
        self.update(text, layout=False)  # three lines, always

    @staticmethod
    def _guard_line(view: ConsoleGuard, stats: GuardStats, colors: Mapping[str, str]) -> Text:
        role = _STATUS_ROLE.get(view.status, "trip")
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("● ", style=colors[role])
        line.append(f"guard {view.status}", style=f"bold {colors[role]}")
        if stats.pid:
            line.append(f" (pid {stats.pid})", style=colors["muted"])
        # What the operator must not miss comes before the paths, which a narrow terminal cuts short.
        if stats.paused:
            line.append("  GUARD PAUSED: every call allowed", style=f"bold reverse {colors['warn']}")
        return line

    @staticmethod
    def _guards_line(state: ConsoleState, colors: Mapping[str, str]) -> Text:
        """Each guard: its label and status (`paused` if it is), the ones to look at first."""
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f"{len(state.guards)} guards ", style=colors["muted"])
        for view in sorted(state.guards, key=lambda v: (v.reachable, not v.paused, v.number)):
            role = _STATUS_ROLE.get(view.status, "trip")
            line.append("  ● ", style=colors[role])
            line.append_text(plain(view.label, style="bold"))
            line.append(f" {view.status}", style=colors[role])
            if view.paused:
                line.append(" PAUSED", style=f"bold reverse {colors['warn']}")
        return line

    def on_resize(self) -> None:
        # The counts line is fitted to the width: fit it again now rather than at the next redraw.
        if self._shown is not None:
            self.show(*self._shown)

    @staticmethod
    def _counts(
        state: ConsoleState,
        stats: GuardStats,
        colors: Mapping[str, str],
        *,
        harness_list: bool,
        total: bool,
        split: bool,
    ) -> Text:
        """The second line: harnesses, agents, checks, trips, denies and warnings. Narrower variants leave
        out the denies' split by kind, then the checks' total, then the harnesses' names."""
        line = Text(no_wrap=True, overflow="ellipsis")
        harnesses = stats.harnesses
        line.append("harnesses ", style=colors["muted"])
        if not harnesses:
            line.append("none", style="dim")
        elif not harness_list:
            line.append(str(sum(harnesses.values())))
        else:
            for i, (name, n) in enumerate(sorted(harnesses.items())):
                if i:
                    line.append(", ")
                line.append_text(plain(name))
                line.append(f" {n}")
        line.append("   agents ", style=colors["muted"])
        line.append(str(len(state.agents)))
        line.append("   ")
        line.append(f"{state.checks_per_s:,.0f} checks/s", style="bold")
        if total:
            line.append("   checks ", style=colors["muted"])
            line.append(f"{stats.checks:,}")
        # Three numbers, three words: a trip is an agent's first deny of a kind (the trips list); denies
        # counts every denied call, by kind; warnings counts the calls allowed with a warning.
        line.append("   trips ", style=colors["muted"])
        line.append(str(state.trips_seen), style=f"bold {colors['trip']}" if state.trips_seen else "")
        line.append("   denies ", style=colors["muted"])
        line.append(f"{sum(stats.denies.values()):,}")
        shown = by_kind(stats.denies)
        if split and shown:
            line.append(" (", style=colors["muted"])
            for i, (kind, count) in enumerate(shown):
                line.append(" · " if i else "", style=colors["muted"])
                line.append_text(plain(kind, style=colors["muted"]))
                line.append(f" {count:,}", style=colors["muted"])
            line.append(")", style=colors["muted"])
        line.append("   warnings ", style=colors["muted"])
        line.append(f"{stats.warnings:,}", style=f"bold {colors['warn']}" if stats.warnings else "")
        return line
