"""What one `cbconsole setup` run is asked (`Options`) and every change it makes (`Plan`): shared by the JSON
harnesses' setup (`breaker.wiring.setup`) and dsh's (`breaker.wiring.setup_dsh`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from breaker.wiring.files import Change
from breaker.wiring.harnesses import Places, cbhook_command

__all__ = ["Options", "Plan"]


@dataclass(frozen=True)
class Options:
    """What one `cbconsole setup` run was asked."""

    harness: str
    places: Places
    cbhook: Path
    project: Path | None = None
    profile: str | None = None  # dsh: a profile's layer instead of $DSH_HOME's
    socket: str | None = None
    fail_closed: bool = False
    keep_loop_detector: bool = False  # gemini: leave Gemini CLI's own loop detector as it is
    remove: bool = False

    @property
    def command(self) -> str:
        return cbhook_command(self.cbhook, socket=self.socket, fail_closed=self.fail_closed)


@dataclass
class Plan:
    """Every file one run changes, in the order they are written, and what to tell the user."""

    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> list[Change]:
        return [c for c in self.changes if c.changed]
