"""The guard's counts for its metrics: checks by harness and decision, denies, trips and warnings by
kind, and the server's time per check in fixed buckets. Plain numbers, kept on the event loop by the
session; the metrics thread only ever sees a `TallyCopy` the loop made (breaker/metrics.py).

Labels are bounded: a harness name comes from a client, so any name but the known ones counts as
`other` (and a check with none as `unknown`); kinds and rules come from the engine's own words.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from breaker.vocab import Outcome

__all__ = [
    "ALLOW",
    "BUCKETS",
    "DECISIONS",
    "DENY",
    "HARNESS_LABELS",
    "PASS",
    "WARN",
    "Tally",
    "TallyCopy",
    "harness_label",
]

# What a check's decision counts as: allowed and recorded; allowed without being judged (exempt, outside
# `only`, paused or disabled); allowed with a warning; denied. The order is the index into a row.
DECISIONS: tuple[Outcome, ...] = ("allow", "pass", "warn", "deny")
ALLOW, PASS, WARN, DENY = range(4)

# The harness names the project's own adapters send (cbhook's, the dsh plugin's, the Python client's
# default, cbreplay's); any other name is `other`, none at all `unknown`.
HARNESS_LABELS = ("dsh", "claude-code", "codex", "gemini-cli", "cursor", "python", "cbreplay")
OTHER, UNKNOWN = "other", "unknown"
_LABEL = {name: name for name in HARNESS_LABELS} | {"": UNKNOWN}

# Upper bounds, in seconds, of the time-per-check histogram's buckets: a check takes 5-30 us in the
# server; the top buckets catch the event loop being held up by something else.
BUCKETS = (5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1)


def harness_label(name: str) -> str:
    """The metrics label for a harness name a client gave: one of HARNESS_LABELS, `other` or `unknown`."""
    return _LABEL.get(name, OTHER)


@dataclass(frozen=True, slots=True)
class TallyCopy:
    """A consistent copy of a `Tally`, safe to read on another thread."""

    checks: tuple[tuple[str, tuple[int, int, int, int]], ...]  # (harness label, counts by DECISIONS)
    denies: tuple[tuple[str, int], ...]
    trips: tuple[tuple[str, int], ...]
    warnings: tuple[tuple[str, int], ...]
    buckets: tuple[int, ...]  # checks per bucket (not cumulative), the last one past BUCKETS[-1]
    seconds: float  # the sum of every timed check's seconds


class Tally:
    """Counts since this guard process started. `rows[harness]` is a list of counts by DECISIONS,
    shared by every harness name with the same label (so a flood of made-up names adds no rows)."""

    __slots__ = ("buckets", "denies", "labels", "rows", "seconds", "trips", "warnings")

    def __init__(self, kinds: tuple[str, ...], rules: tuple[str, ...]) -> None:
        self.labels: dict[str, list[int]] = {}  # harness label -> its counts
        self.rows: dict[str, list[int]] = {}  # harness name as sent (known names only) -> its label's counts
        self.denies = dict.fromkeys(kinds, 0)
        self.trips = dict.fromkeys(kinds, 0)
        self.warnings = dict.fromkeys(rules, 0)
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.seconds = 0.0

    def row(self, harness: str) -> list[int]:
        """The counts a check by `harness` adds to (the hot path looks in `rows` first)."""
        label = harness_label(harness)
        counts = self.labels.get(label)
        if counts is None:
            counts = self.labels[label] = [0, 0, 0, 0]
        if label != OTHER:
            self.rows[harness] = counts
        return counts

    def observe(self, seconds: float) -> None:
        """One check took the server `seconds`."""
        self.buckets[bisect_left(BUCKETS, seconds)] += 1
        self.seconds += seconds

    def copy(self) -> TallyCopy:
        return TallyCopy(
            checks=tuple((label, (c[0], c[1], c[2], c[3])) for label, c in self.labels.items()),
            denies=tuple(self.denies.items()),
            trips=tuple(self.trips.items()),
            warnings=tuple(self.warnings.items()),
            buckets=tuple(self.buckets),
            seconds=self.seconds,
        )
