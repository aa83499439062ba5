"""The cbconsole app: the main screen over one guard session, themes, quitting, and the terminal's signals."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shlex
import signal
import sys
import termios
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.cells import cell_len
from rich.segment import Segment
from rich.text import Text
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.color import Color
from textual.filter import LineFilter
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable

from breaker.paths import default_operator_socket_path, default_socket_path
from console.inert import inert, inert_lines, unsafe
from console.keymap import keymap_path, load_keymap
from console.screens.agent import AgentScreen
from console.screens.config import ConfigScreen
from console.screens.confirm import Choice, ConfirmScreen
from console.screens.help import HelpScreen
from console.screens.main import MainScreen
from console.screens.override import OverrideScreen
from console.session import GuardSession, OnQuit
from console.state import ConsoleState
from console.themes import THEME_VARIABLES, load_themes
from console.widgets.agents import AgentsTable
from console.widgets.calls import CallTail

__all__ = ["CBConsole", "InertLines", "LeftRunning", "keymap_scopes"]

# The terminal closed (SIGHUP: tmux kill-session, a dropped SSH session) or the console was told to end:
# the quit policy applies without asking, as there may be no one left to ask.
ENDING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


def keymap_scopes() -> dict[str, list[Binding]]:
    """The bindings in force together, by screen: the user's keymap may not give one of them another's key.
    The app's keys are in force on every screen, and on the main screen the tables' own keys come first."""
    app = [b for b in CBConsole.BINDINGS if isinstance(b, Binding)]
    screens: dict[str, list[Binding]] = {
        "main": [*MainScreen.BINDINGS, *AgentsTable.BINDINGS, *DataTable.BINDINGS],  # type: ignore[list-item]
        "agent": [*AgentScreen.BINDINGS, *CallTail.BINDINGS],  # type: ignore[list-item]
        "override": list(OverrideScreen.BINDINGS),  # type: ignore[arg-type]
        "config": list(ConfigScreen.BINDINGS),  # type: ignore[arg-type]
        "confirm": list(ConfirmScreen.BINDINGS),  # type: ignore[arg-type]
        "help": list(HelpScreen.BINDINGS),  # type: ignore[arg-type]
    }
    return {name: [b for b in (*bindings, *app) if isinstance(b, Binding)] for name, bindings in screens.items()}


@dataclass(frozen=True, slots=True)
class LeftRunning:
    """The guard this console started and left running when it quit: what the terminal is told once the screen
    is gone (which pid, the exact command that stops it, how to watch it again, its log)."""

    pid: int
    socket: Path  # its harness socket
    operator_socket: Path
    log: Path

    def note(self) -> str:
        """The lines printed after the console quit."""
        attach = ["cbconsole", "--attach"]
        if self.socket != default_socket_path():
            attach += ["--socket", str(self.socket)]
        if self.operator_socket != default_operator_socket_path(self.socket):
            attach += ["--operator-socket", str(self.operator_socket)]
        return (
            f"cbconsole: the guard is still running (pid {self.pid}), serving harnesses on {self.socket}\n"
            f"  stop it:     kill {self.pid}\n"
            f"  watch it:    {shlex.join(attach)}\n"
            f"  its log:     {self.log}"
        )


class InertLines(LineFilter):
    """The last guard between agents' strings and the terminal: every line drawn leaves without a control or
    invisible format character (console.inert). What the console draws from the wire is escaped where it is drawn
    (`plain`), so this finds nothing; a place that forgot is drawn without the character rather than obeying it
    (a blank of its width: the line's width is unchanged). One `isprintable()` per segment of a line drawn anew."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if all(segment.text.isprintable() for segment in segments):
            return segments
        return [Segment(_blanked(s.text), s.style, s.control) for s in segments]


def _blanked(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(" " * cell_len(c) if unsafe(c) else c for c in text)


class CBConsole(App[int]):
    """`session` says which guard and what ending does to it (see console/session.py); tests pass one
    that connects to nothing and feed frames to `state`."""

    CSS_PATH = "console.tcss"
    TITLE = "cbconsole"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", id="app.quit", show=False, tooltip="Quit")]

    def __init__(
        self,
        session: GuardSession,
        *,
        theme: str | None = None,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.session = session
        self.requested_theme = theme
        self.readonly = readonly
        self.state = ConsoleState(clock=clock, guards=session.guard_names())
        self.main = MainScreen(self.state, session, readonly=readonly, clock=clock)
        self.theme_errors: list[str] = []
        self.keymap_errors: list[str] = []
        self._ending: asyncio.Task[None] | None = None
        self.left_running: LeftRunning | None = None  # set when quitting left the guard this console started running
        self._inert_lines = InertLines()

    def get_line_filters(self) -> list[LineFilter]:
        return [*super().get_line_filters(), self._inert_lines]

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every notice, from any screen or widget: plain text (never markup), control and invisible format
        characters escaped (messages quote agent ids, tool names, the guard's words); its line breaks kept."""
        super().notify(inert_lines(message), title=inert(title), severity=severity, timeout=timeout, markup=False)

    def get_default_screen(self) -> MainScreen:
        return self.main

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(THEME_VARIABLES)

    async def on_mount(self) -> None:
        loaded = load_themes()
        for theme in loaded.themes.values():
            self.register_theme(theme)
        self.theme_errors = loaded.errors
        if loaded.errors:
            self.tell("\n".join(loaded.errors), title="Some themes could not be loaded", severity="warning", timeout=15)
        self.set_theme_by_name(self.requested_theme or "dark")
        self.apply_keymap()
        loop = asyncio.get_running_loop()
        for sig in ENDING_SIGNALS:
            loop.add_signal_handler(sig, self._on_ending_signal, sig)
        await self.session.open(self.state, self.tell)
        # What exists now (Textual, the screens, the themes) lives as long as the app: out of the collector's
        # sight, a full collection walks only what came since. In the drill-down at 1,000 calls/s the full
        # collections were the console's longest stalls (tests/bench/bench_console.py).
        gc.freeze()

    def on_unmount(self) -> None:
        for sig in ENDING_SIGNALS:
            asyncio.get_running_loop().remove_signal_handler(sig)

    def apply_keymap(self) -> None:
        """The user's keymap, its good entries applied and its errors in one notice."""
        keymap = load_keymap(keymap_path(), keymap_scopes())
        self.keymap_errors = keymap.errors
        if keymap.keys:
            self.set_keymap(keymap.keys)
        if keymap.errors:
            self.tell("\n".join(keymap.errors), title="Some keys were not applied", severity="warning", timeout=20)

    def tell(
        self, message: str, *, title: str = "", severity: str = "information", timeout: float | None = None
    ) -> None:
        """A notice for the operator, always plain text (messages may quote agent ids or file names)."""
        self.notify(message, title=title, severity=severity, timeout=timeout)  # type: ignore[arg-type]

    def set_theme_by_name(self, name: str) -> bool:
        for candidate in (name, f"cbconsole-{name}"):
            if candidate in self.available_themes:
                self.theme = candidate
                return True
        self.tell(f"no theme {name!r}; available: {', '.join(sorted(self.available_themes))}", severity="warning")
        if self.theme not in self.available_themes or not self.theme.startswith("cbconsole-"):
            self.theme = "cbconsole-dark" if "cbconsole-dark" in self.available_themes else self.theme
        return False

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, MainScreen):
            yield from screen.commands()
        for name in sorted(self.available_themes):
            if name.startswith("cbconsole-"):
                short = name.removeprefix("cbconsole-")
                yield SystemCommand(f"Theme: {short}", f"Switch to the {short} theme", self._theme_setter(name))

    def _theme_setter(self, name: str) -> Callable[[], None]:
        def set_theme() -> None:
            self.theme = name

        return set_theme

    # -- quitting -----------------------------------------------------------------------------------

    async def action_quit(self) -> None:
        harnesses = self.state.harnesses
        on_quit = self.session.on_quit(harnesses)
        if on_quit is not OnQuit.ASK:
            await self.shutdown(leave_running=on_quit is OnQuit.LEAVE)
            return
        names = ", ".join(f"{inert(n)} ({c})" for n, c in sorted(harnesses.items()))
        body = Text(
            f"Harnesses are connected to this guard: {names}.\n"
            "Stopping it makes them fail open (their tool calls are no longer checked)."
        )

        async def done(choice: str | None) -> None:
            if choice in ("stop", "leave"):
                await self.shutdown(leave_running=choice == "leave")

        self.push_screen(
            ConfirmScreen(
                "Quit cbconsole",
                body,
                [
                    Choice("cancel", "Cancel", key="n"),
                    Choice("leave", "Leave the guard running", key="l"),
                    Choice("stop", "Stop the guard", "error", key="s"),
                ],
            ),
            done,
        )

    async def shutdown(self, leave_running: bool = False) -> None:
        supervisor = self.session.supervisor
        pid = supervisor.pid if supervisor is not None else None
        if await self.session.close(leave_running) and supervisor is not None and pid is not None:
            session = self.session
            self.left_running = LeftRunning(pid, session.socket_path, session.operator_socket, supervisor.log_path)
        self.exit(0)

    # -- ending on a signal -------------------------------------------------------------------------

    def _on_ending_signal(self, signum: int) -> None:
        if self._ending is not None:
            return  # already ending
        self.session.ending = True  # from here on nothing is drawn and no child is started
        gone = signum == signal.SIGHUP or not _terminal_alive()
        if gone:
            _leave_the_terminal()
        self._ending = asyncio.create_task(self._end_on_signal(signal.Signals(signum), gone), name="ending")

    async def _end_on_signal(self, sig: signal.Signals, gone: bool) -> None:
        try:
            with self.batch_update():  # no repaint: the terminal may be gone, and writing to it may block
                await self.session.end_on_signal(sig)
        finally:
            if gone:
                # Textual's teardown writes to the terminal to restore it: with the terminal gone its writer
                # thread dies on EIO and the next writes block on its full queue. Nothing is left to restore.
                os._exit(128 + sig)
            self.exit(128 + sig)


def _terminal_alive() -> bool:
    """Whether the terminal Textual draws on still answers (a hung-up terminal fails every ioctl with EIO)."""
    try:
        termios.tcgetattr(sys.__stderr__.fileno())  # type: ignore[union-attr]  # None: AttributeError below
    except (termios.error, OSError, AttributeError, ValueError):
        return False
    return True


def _leave_the_terminal() -> None:
    """Point stdin, stdout and stderr at /dev/null: reads and writes on a hung-up terminal fail with EIO."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd)
    os.close(devnull)
