"""The `cbconsole` command: `setup`, `doctor` and `--headless` are the guard side's own commands; anything else
starts the console, whose module is imported by name when it runs (`breaker` never imports the UI package)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

CONSOLE = "console.command"  # the console's own flags and `main(argv)`; it imports the app (Textual) itself
# After the console's --help: the guard's own flags, which only `--headless` takes (its --help lists them all).
GUARD_FLAGS = """
the guard's own flags (with --headless; all of them: cbconsole --headless --help):
  --metrics [HOST:]PORT  serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md)
  --otel                 send each deny and warning as an OpenTelemetry event over OTLP (the otel extra:
                         pip install -e '.[otel]' in this clone)
  The guard the console starts takes them from its patch layer: the metrics and otelEvents settings."""


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw and raw[0] in ("setup", "doctor"):
        # They wire the harnesses and check them, from the user's shell (no socket reaches them), with no guard.
        from breaker.wiring import cli

        return cli.main(raw)
    if "--headless" in raw:  # the guard's own parser takes every flag (--metrics, --otel, ...) and its --help
        from breaker.headless import main as headless

        return headless([a for a in raw if a != "--headless"])
    # By name, at run time: the import contract "breaker never imports console" holds for every import written
    # in breaker, and setup, doctor and the headless guard never load Textual (docs/architecture.md).
    console = importlib.import_module(CONSOLE)
    try:
        status: int = console.main(raw)
    except SystemExit as exc:  # argparse ends --help so
        if exc.code in (0, None) and ("-h" in raw or "--help" in raw):
            print(GUARD_FLAGS)
        raise
    return status


if __name__ == "__main__":
    sys.exit(main())
