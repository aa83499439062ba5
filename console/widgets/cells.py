"""Cell renderers: untrusted strings become plain `Text` (never markup); gauges, sparklines, ages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text

__all__ = ["age", "clip", "gauge", "kind_color", "plain", "ratio_color", "sparkline", "status_text"]

_SPARKS = "▁▂▃▄▅▆▇█"
_CONTROL = {c: f"\\x{c:02x}" for c in range(32)} | {127: "\\x7f"}


def plain(value: object, style: str = "") -> Text:
    """Untrusted text, shown literally: no markup, control characters escaped, one line."""
    text = "" if value is None else str(value)
    return Text(text.translate(_CONTROL), style=style, no_wrap=True, overflow="ellipsis")


def clip(value: object, width: int) -> str:
    """Shorten to `width` cells keeping both ends (ids differ at the start and the end)."""
    text = "" if value is None else str(value).translate(_CONTROL)
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


# An agent's status word (shown as it is: one word per idea) -> its colour role.
_STATUS_ROLE = {"ok": "ok", "duplicate": "trip", "cap": "cap", "interrupted": "interrupted"}


def kind_color(word: str, colors: Mapping[str, str]) -> str:
    """The colour of a status or deny kind (one this console does not know is muted)."""
    return colors[_STATUS_ROLE.get(word, "muted")]


def status_text(status: str, colors: Mapping[str, str]) -> Text:
    """`ok`, or the kind of deny the agent's next call meets: `duplicate`, `cap`, `interrupted`."""
    color = kind_color(status, colors)
    return plain(status, style=f"bold {color}" if status != "ok" else color)
