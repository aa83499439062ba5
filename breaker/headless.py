"""`cbconsole --headless` (also `python -m breaker.headless`): the guard server alone, logging to stderr.

A guard keeps its state in a file (breaker/store.py) and must compute the same window digests after
a restart, so it runs with the hash seed its state file was made with: if this process was started
with another one, it re-executes itself once with `PYTHONHASHSEED` set (same pid, same arguments).
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


def parser(prog: str = "cbconsole --headless") -> argparse.ArgumentParser:
    from breaker.paths import OPERATOR_SOCKET_ENV, SOCKET_ENV

    p = argparse.ArgumentParser(prog=prog, description="Run the circuit breaker's guard server (no console).")
    p.add_argument("--socket", metavar="PATH", help=f"the harnesses' socket (default: ${SOCKET_ENV}, else per user)")
    p.add_argument(
        "--operator-socket",
        metavar="PATH",
        help=f"the operator's socket (default: ${OPERATOR_SOCKET_ENV}, else beside the harness socket's directory)",
    )
    p.add_argument("--patch", metavar="FILE", action="append", default=[], help="an extra cordis patch layer")
    p.add_argument("--profile", metavar="NAME", help="the dsh profile whose patch layer to read")
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
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _address(text: str) -> str:
    from breaker.config import metrics_address

    if metrics_address(text) is None:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, [IPv6]:PORT or PORT, found {text!r}")
    return text


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
    args = parser(prog).parse_args(args_list)
    from breaker.paths import OPERATOR_SOCKET_ENV, default_operator_socket_path, default_socket_path
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
        env = {**os.environ, SEED_ENV: str(seed)}
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "breaker.headless", *args_list], env)

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from breaker.patch import PatchSources
    from breaker.server import GuardServer, serve

    sources = PatchSources.from_env(profile=args.profile, patches=args.patch)
    server = GuardServer(
        socket_path,
        sources,
        operator_socket=operator_path,
        state_path=state,
        hash_seed=seed,
        metrics=args.metrics,
        otel=args.otel,
    )
    return serve(server)


if __name__ == "__main__":
    sys.exit(main(prog="python -m breaker.headless"))
