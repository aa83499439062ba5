"""The `cbconsole` command: the console (default), the headless guard, or attaching to a running one."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from breaker import __version__
from breaker.paths import SOCKET_ENV, default_socket_path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cbconsole",
        description="A circuit breaker for AI-agent tool calls, with a live operator console.",
    )
    p.add_argument("--headless", action="store_true", help="run the guard server alone (no console), logging to stderr")
    p.add_argument(
        "--socket",
        metavar="PATH",
        help=f"the guard's Unix socket (default: ${SOCKET_ENV}, else {default_socket_path({})})",
    )
    p.add_argument(
        "--patch",
        metavar="FILE",
        action="append",
        default=[],
        help="an extra cordis patch layer (repeatable; later wins)",
    )
    p.add_argument(
        "--profile", metavar="NAME", help="the dsh profile whose patch layer to read ($DSH_HOME/profiles/NAME)"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--version", action="version", version=f"cbconsole {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    socket_path = Path(args.socket).expanduser() if args.socket else default_socket_path()
    if args.headless:
        from breaker.patch import PatchSources
        from breaker.server import serve

        sources = PatchSources.from_env(profile=args.profile, patches=args.patch)
        return serve(socket_path, sources)
    print("cbconsole: the console screen is not part of this version yet; run `cbconsole --headless`.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
