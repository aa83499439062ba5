"""The console's side of the `cbconsole` command (`breaker.cli` imports it by name when it runs): the console's
flags, checked, then one guard session and the app. Textual is imported only for the screen, once the flags are
good: `cbconsole --help`, `--version` and a mistyped flag answer without it."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from breaker import __version__
from breaker.paths import (
    OPERATOR_SOCKET_ENV,
    SOCKET_ENV,
    default_operator_socket_path,
    default_socket_path,
    missing_layer,
)

if TYPE_CHECKING:
    from console.session import FleetMember

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cbconsole",
        description="A circuit breaker for AI-agent tool calls, with a live operator console.",
        epilog="Also: `cbconsole setup HARNESS` wires a harness (claude-code, codex, gemini, dsh, cursor) to the "
        "guard, and `cbconsole doctor` checks that every installed harness is guarded (each has --help).",
    )
    p.add_argument("--headless", action="store_true", help="run the guard server alone (no console), logging to stderr")
    p.add_argument(
        "--socket",
        metavar="PATH",
        help=f"the guard's Unix socket (default: ${SOCKET_ENV}, else {default_socket_path({})})",
    )
    p.add_argument(
        "--operator-socket",
        metavar="PATH",
        help=f"the operator's socket (default: ${OPERATOR_SOCKET_ENV}, else beside the harness socket's directory)",
    )
    p.add_argument(
        "--state",
        metavar="PATH",
        help="where the guard keeps its state across restarts (default: $XDG_STATE_HOME/cbconsole/state/…; 'none')",
    )
    p.add_argument(
        "--patch",
        metavar="FILE",
        action="append",
        default=[],
        help="an extra cordis patch layer (repeatable; later wins); it must exist: an empty file is an empty layer",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        help="the dsh profile whose patch layer to read ($DSH_HOME/profiles/NAME, existing)",
    )
    p.add_argument(
        "--attach",
        metavar="[NAME=]PATH",
        nargs="?",
        action="append",
        const="",
        help="attach to a running guard; never start one. PATH: its socket, or an operator socket (a file named "
        "operator.sock, as SSH can forward one). Repeat it for one console over several guards, each named NAME "
        "or else its host",
    )
    p.add_argument("--theme", metavar="NAME", help="dark (default), light, high-contrast, or a theme of yours")
    p.add_argument("--readonly", action="store_true", help="watch only: every action that changes the guard is off")
    p.add_argument("--demo", action="store_true", help="a private guard driven by simulated looping agents")
    p.add_argument(
        "--replay", metavar="PATH", action="append", help="play a transcript into the live guard (repeatable)"
    )
    p.add_argument(
        "--speed", type=float, default=1.0, help="replay speed (1 = as recorded, 10 = ten times faster, 0 = at once)"
    )
    p.add_argument("--leave-running", action="store_true", help="on quit, leave the guard this console started running")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--version", action="version", version=f"cbconsole {__version__}")
    return p


def _absolute(path: str) -> Path:
    return Path(path).expanduser().absolute()


def _unknown_theme(name: str) -> str | None:
    """Why `--theme name` names no theme (what there is, where a user's own go), or None if it does."""
    from console.themes import load_themes, user_theme_dir

    loaded = load_themes()
    if loaded.find(name):
        return None
    broken = "".join(f"\n  {e}" for e in loaded.errors)
    return (
        f"no theme {name!r}; available: {', '.join(loaded.short_names())}"
        f" (your own go in {user_theme_dir()}/NAME.yaml)" + (f"; these could not be loaded:{broken}" if broken else "")
    )


def _members(specs: list[str], socket_path: Path, operator_socket: Path | None) -> list[FleetMember] | str:
    """The guards `--attach [NAME=]PATH …` names, or why they are not right. `--attach` alone is the guard on
    `--socket` (or the default socket); NAME= is taken when the text before the first `=` has no `/`."""
    from console.session import FleetMember, operator_socket_for

    members: list[FleetMember] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or "/" in name:
            name, path = "", spec
        elif not name.strip():
            return f"--attach {spec!r}: the name before '=' is empty"
        if not path:
            if len(specs) > 1:
                return "--attach without a PATH attaches to one guard only; give each guard its PATH"
            members.append(FleetMember(name, operator_socket or default_operator_socket_path(socket_path)))
            continue
        if len(specs) > 1 and operator_socket is not None:
            return "--operator-socket names one guard's operator socket; with several --attach, give each its PATH"
        members.append(FleetMember(name.strip(), operator_socket or operator_socket_for(Path(path))))
    sockets = [str(m.operator_socket) for m in members]
    if len(set(sockets)) < len(sockets):
        return f"--attach names the same guard twice: {sorted(s for s in sockets if sockets.count(s) > 1)[0]}"
    return members


def main(argv: list[str]) -> int:
    """`cbconsole [flags]`: `breaker.cli` has handed `setup`, `doctor` and `--headless` to the guard side."""
    p = parser()
    args = p.parse_args(argv)
    if problem := missing_layer(args.patch, args.profile):
        p.error(problem)  # a typo would start the guard on other limits: refused before the screen starts
    socket_path = Path(args.socket).expanduser() if args.socket else default_socket_path()
    if args.demo and (args.attach or args.replay):
        print(
            "cbconsole: --demo runs its own private guard; it cannot be combined with --attach or --replay",
            file=sys.stderr,
        )
        return 2
    if args.speed < 0:
        print("cbconsole: --speed must be 0 (as fast as possible) or more", file=sys.stderr)
        return 2
    if args.theme is not None and (error := _unknown_theme(args.theme)):
        p.error(error)  # before the screen starts: the message stays readable, and the exit status says it
    from console.app import CBConsole  # Textual is imported only for the screen
    from console.session import (
        AttachedGuard,
        DemoGuard,
        FleetSession,
        GuardOptions,
        GuardSession,
        OwnGuard,
        ReplayGuard,
    )

    operator = args.operator_socket or os.environ.get(OPERATOR_SOCKET_ENV)
    operator_socket = Path(operator).expanduser() if operator else None
    # Files by their absolute paths (the guard and the feeders run in this directory too, but say where). Not the
    # sockets: a socket's path is limited to 107 bytes, which an absolute path may pass where a relative does not.
    options = GuardOptions(
        state=args.state if args.state in (None, "none") else str(_absolute(args.state)),
        patches=tuple(str(_absolute(p)) for p in args.patch),
        profile=args.profile,
    )
    session: GuardSession
    if args.demo:
        session = DemoGuard()
    elif args.replay:
        replays = [str(_absolute(path)) for path in args.replay]
        session = ReplayGuard(socket_path, replays, speed=args.speed, operator_socket=operator_socket, options=options)
    elif args.attach:
        members = _members(args.attach, socket_path, operator_socket)
        if isinstance(members, str):
            p.error(members)
        if len(members) == 1:
            name, sep, path = args.attach[0].partition("=")
            given = path if sep and "/" not in name else args.attach[0]  # the path as the operator gave it
            session = AttachedGuard(Path(given).expanduser() if given else socket_path, members[0].operator_socket)
        else:
            session = FleetSession(members)
    else:
        session = OwnGuard(socket_path, operator_socket, options, leave_running=args.leave_running)
    app = CBConsole(session, theme=args.theme, readonly=args.readonly)
    code = app.run() or 0
    if app.left_running is not None:  # the screen is gone: say what still runs and how to stop it
        print(app.left_running.note(), file=sys.stderr)
    return code
