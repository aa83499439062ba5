"""`cbconsole --headless` (also `python -m breaker.headless`): the guard server alone, logging to stderr.

A guard keeps its state in a file (breaker/store.py) and must compute the same window digests after
a restart, so it runs with the hash seed its state file was made with: if this process was started
with another one, it re-executes itself once with `PYTHONHASHSEED` set (same pid, same arguments), as
`python -P`: never with the current directory on `sys.path` (breaker.paths.python_child).

A guard the console starts is told its parent with `--parent-fd`: the read end of a pipe whose write
end the console holds. The kernel closes it when the console ends, however it ends (`kill -9` too):
the guard then applies the console's own rule for a signal (`--if-orphaned`: the console's own guard
keeps serving harnesses connected then; a demo's or a replay's stops), and a demo's guard takes its
directory with it (`--temporary-dir`). Before it exits leaving its guard running, the console writes
`L` on the pipe: the guard stops watching.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from pathlib import Path

__all__ = ["main", "parser"]

SEED_ENV = "PYTHONHASHSEED"
LEAVE = b"L"  # what a parent writes on its pipe before it exits leaving the guard running (--leave-running)
ORPHAN_POLICIES = ("stop", "keep-if-used")

log = logging.getLogger("cbconsole.guard")


def parser(prog: str = "cbconsole --headless") -> argparse.ArgumentParser:
    from breaker.paths import OPERATOR_SOCKET_ENV, SOCKET_ENV

    p = argparse.ArgumentParser(prog=prog, description="Run the circuit breaker's guard server (no console).")
    p.add_argument("--socket", metavar="PATH", help=f"the harnesses' socket (default: ${SOCKET_ENV}, else per user)")
    p.add_argument(
        "--operator-socket",
        metavar="PATH",
        help=f"the operator's socket (default: ${OPERATOR_SOCKET_ENV}, else beside the harness socket's directory)",
    )
    p.add_argument(
        "--patch",
        metavar="FILE",
        action="append",
        default=[],
        help="an extra cordis patch layer; it must exist (an empty file is an empty layer the console's edits go to)",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        help="the dsh profile whose patch layer to read ($DSH_HOME/profiles/NAME must exist)",
    )
    p.add_argument(
        "--state",
        metavar="PATH",
        help="where the guard keeps its state across restarts (default: under $XDG_STATE_HOME/cbconsole/state/; "
        "'none' = keep nothing)",
    )
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        type=_address,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (PORT alone: on 127.0.0.1); wins over the "
        "metrics setting for this run (docs/metrics.md)",
    )
    p.add_argument(
        "--otel",
        action="store_true",
        help="export each deny and warning as an OpenTelemetry event over OTLP, as the OTEL_* variables say "
        "(needs pip install 'cbconsole[otel]'); on whatever the otelEvents setting says",
    )
    p.add_argument(
        "--parent-fd",
        metavar="FD",
        type=_descriptor,
        help="the read end of a pipe whose other end the process that starts this guard holds (the console does): "
        "when it closes, that process has ended (even by kill -9), and the guard stops (see --if-orphaned)",
    )
    p.add_argument(
        "--if-orphaned",
        choices=ORPHAN_POLICIES,
        default="stop",
        help="with --parent-fd, once the parent has ended: stop (the default), or keep-if-used: keep serving the "
        "harnesses connected then (the console's own rule for a signal)",
    )
    p.add_argument(
        "--temporary-dir",
        metavar="DIR",
        help="with --parent-fd: a directory that holds everything of this guard (the console's demo), removed "
        "once the guard has stopped because its parent ended",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _address(text: str) -> str:
    from breaker.config import metrics_address

    if metrics_address(text) is None:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, [IPv6]:PORT or PORT, found {text!r}")
    return text


def _descriptor(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a file descriptor number, found {text!r}")
    fd = int(text)
    try:
        os.fstat(fd)
    except OSError:
        raise argparse.ArgumentTypeError(f"{fd} is not an open file descriptor of this process") from None
    return fd


def _seed_for(state: Path | None) -> int | None:
    """The hash seed this guard must run with: its state file's, or a new one for a new file."""
    if state is None:
        return None
    from breaker.store import read_hash_seed

    return read_hash_seed(state) or _current_seed() or secrets.randbelow(4294967295) + 1


def _current_seed() -> int | None:
    """This process's fixed hash seed, if it has one (after our own re-execution, it does)."""
    text = os.environ.get(SEED_ENV, "")
    return int(text) if text.isdigit() and 0 < int(text) <= 4294967295 else None


def main(argv: list[str] | None = None, prog: str = "cbconsole --headless") -> int:
    args_list = sys.argv[1:] if argv is None else list(argv)
    p = parser(prog)
    args = p.parse_args(args_list)
    if args.parent_fd is None and (args.temporary_dir is not None or args.if_orphaned != "stop"):
        p.error("--temporary-dir and --if-orphaned go with --parent-fd: the pipe that says the parent has ended")
    from breaker.paths import (
        OPERATOR_SOCKET_ENV,
        default_operator_socket_path,
        default_socket_path,
        missing_layer,
        python_child,
    )

    if problem := missing_layer(args.patch, args.profile):
        p.error(problem)  # before anything starts: the exit status and the message say it
    from breaker.store import default_state_path

    socket_path = Path(args.socket).expanduser() if args.socket else default_socket_path()
    operator = args.operator_socket or os.environ.get(OPERATOR_SOCKET_ENV)
    operator_path = Path(operator).expanduser() if operator else default_operator_socket_path(socket_path)
    if args.state == "none":
        state: Path | None = None
    else:
        state = Path(args.state).expanduser() if args.state else default_state_path(socket_path)
    seed = _seed_for(state)
    if seed is not None and os.environ.get(SEED_ENV) != str(seed):
        command, env = python_child("breaker.headless", {**os.environ, SEED_ENV: str(seed)})
        sys.stderr.flush()
        os.execve(command[0], [*command, *args_list], env)  # --parent-fd's pipe is inheritable: it survives this

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.parent_fd is not None:
        os.set_inheritable(args.parent_fd, False)  # the guard's own children (interrupt commands) never get it
    return _serve(args, socket_path, operator_path, state, seed)


def _serve(
    args: argparse.Namespace, socket_path: Path, operator_path: Path, state: Path | None, seed: int | None
) -> int:
    """Run the guard until a signal (or its parent's end) stops it."""
    import asyncio
    import shutil

    from breaker.patch import PatchSources
    from breaker.server import GuardServer, serve

    class HeadlessGuard(GuardServer):
        """A GuardServer that watches its parent's pipe (`--parent-fd`)."""

        parent_fd: int | None = args.parent_fd
        keep_if_used = args.if_orphaned == "keep-if-used"
        orphaned = False  # stopped because the parent has ended
        orphan_stop: asyncio.Future[None] | None = None  # that stop, kept while it runs

        async def start(self) -> None:
            await super().start()
            if self.parent_fd is not None:
                asyncio.get_running_loop().add_reader(self.parent_fd, self._parent_readable)

        def _parent_readable(self) -> None:
            fd = self.parent_fd
            assert fd is not None
            try:
                said = os.read(fd, 64)
            except OSError:
                said = b""
            if said and LEAVE not in said:
                return  # nothing else is ever written: not a word of ours
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)
            self.parent_fd = None
            if said:
                log.info("the console that started this guard has ended, leaving it running (pid %d)", os.getpid())
                return
            harnesses = self.session.current_stats().harnesses
            if harnesses and self.keep_if_used:
                names = ", ".join(f"{name!r} {count}" for name, count in sorted(harnesses.items()))
                log.warning(
                    "the console that started this guard has ended; the guard keeps serving %d harness "
                    "connection(s) (%s); stop it with kill %d",
                    sum(harnesses.values()),
                    names,
                    os.getpid(),
                )
                return
            log.warning("the console that started this guard has ended: stopping")
            self.orphaned = True
            self.orphan_stop = asyncio.ensure_future(self.stop())

    server = HeadlessGuard(
        socket_path,
        PatchSources.from_env(profile=args.profile, patches=args.patch),
        operator_socket=operator_path,
        state_path=state,
        hash_seed=seed,
        metrics=args.metrics,
        otel=args.otel,
    )
    code = serve(server)
    if server.orphaned and args.temporary_dir is not None:
        shutil.rmtree(args.temporary_dir, ignore_errors=True)
        log.info("removed %s, the temporary directory of a guard whose parent has ended", args.temporary_dir)
    return code


if __name__ == "__main__":
    sys.exit(main(prog="python -m breaker.headless"))
