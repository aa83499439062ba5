"""Cell renderers: untrusted strings become plain `Text` (never markup); gauges, sparklines, ages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text

from console.inert import inert

__all__ = [
    "KIND_ORDER",
    "age",
    "by_kind",
    "clip",
    "gauge",
    "kind_color",
    "own_limits",
    "plain",
    "ratio_color",
    "sparkline",
    "status_text",
]

_SPARKS = "▁▂▃▄▅▆▇█"


def plain(value: object, style: str = "") -> Text:
    """Untrusted text, shown literally: no markup; control and invisible format characters escaped
    (console.inert: `\\x1b`, `\\x9b`, `<U+202E>`); one line."""
    text = "" if value is None else str(value)
    return Text(inert(text), style=style, no_wrap=True, overflow="ellipsis")


def clip(value: object, width: int) -> str:
    """Shorten to `width` cells keeping both ends (ids differ at the start and the end), escaped first."""
    text = "" if value is None else inert(str(value))
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def ratio_color(ratio: float, colors: Mapping[str, str]) -> str:
    if ratio >= 1:
        return colors["trip"]
    if ratio >= 0.5:
        return colors["warn"]
    return colors["ok"]


def gauge(count: int, limit: int, colors: Mapping[str, str], width: int = 6) -> Text:
    """`██████ 6/6`: how close the worst repeated call is to the duplicate limit."""
    ratio = count / limit if limit else 0.0
    filled = min(width, round(width * min(ratio, 1.0)))
    color = ratio_color(ratio, colors)
    text = Text(no_wrap=True)
    text.append("█" * filled, style=color)
    text.append("░" * (width - filled), style=colors["muted"])
    text.append(f" {count}/{limit}", style=color if ratio >= 0.5 else "")
    return text


def sparkline(values: Iterable[int], color: str) -> Text:
    values = list(values)
    top = max(values) if values else 0
    if top <= 0:
        return Text(_SPARKS[0] * len(values), style="dim", no_wrap=True)
    return Text("".join(_SPARKS[min(7, (v * 7 + top - 1) // top)] for v in values), style=color, no_wrap=True)


def age(seconds: float | None) -> Text:
    if seconds is None:
        return Text("-", style="dim")
    seconds = max(0.0, seconds)
    if seconds < 1:
        return Text("<1s")  # whole seconds: an age that ticks ten times a second is noise (and costs a redraw)
    if seconds < 90:
        return Text(f"{int(seconds)}s")
    if seconds < 5400:
        return Text(f"{seconds / 60:.0f}m", style="dim")
    return Text(f"{seconds / 3600:.0f}h", style="dim")


# The deny kinds (and the rules that warn) in the order the console lists them: the loops caught, the
# budget spent, the operator's stop. A kind this console does not know comes after them.
KIND_ORDER = ("duplicate", "repeat", "cycle", "stall", "reworded", "cap", "interrupted")

# An agent's status word, or a deny kind (shown as it is: one word per idea) -> its colour role.
_STATUS_ROLE = {
    "ok": "ok",
    "warned": "warn",
    "duplicate": "trip",
    "repeat": "trip",
    "cycle": "trip",
    "stall": "trip",
    "reworded": "trip",
    "cap": "cap",
    "interrupted": "interrupted",
}


def kind_color(word: str, colors: Mapping[str, str]) -> str:
    """The colour of a status or deny kind. A word this console does not know is a newer guard's deny kind
    (a status is `ok`, `warned` or a deny kind): a loop caught."""
    return colors[_STATUS_ROLE.get(word, "trip")]


def by_kind(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """The non-zero counts of a `denies` or `warns` mapping, in KIND_ORDER (unknown kinds after, by name)."""
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    return sorted(((k, n) for k, n in counts.items() if n), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


def status_text(status: str, rule: str, colors: Mapping[str, str]) -> Text:
    """`ok`; `warned · <rule>` (its last call was allowed with that rule's warning); or the kind of deny
    its next call meets: `duplicate`, `repeat`, `cycle`, `cap`, `interrupted`."""
    color = kind_color(status, colors)
    if status == "ok":
        return plain(status, style=color)
    text = plain(status, style=f"bold {color}")
    if status == "warned" and rule:
        text.append(" · ", style=color)
        text.append_text(plain(rule, style=color))
    return text


OWN_WORDS = {"maxCallsPerAgent": "own cap", "duplicateLimit": "own duplicate limit"}  # an agent's override, in words


def own_limits(override: Mapping[str, int], colors: Mapping[str, str]) -> Text:
    """`own cap 400 · own duplicate limit 10`: the limits the operator gave one agent (empty for none)."""
    text = Text(no_wrap=True)
    for key, word in OWN_WORDS.items():
        if key in override:
            text.append(" · " if text else "", style=colors["muted"])
            text.append(f"{word} {override[key]:,}", style=f"bold {colors['warn']}")
    return text
