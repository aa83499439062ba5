"""The top repeated keys: which call, by which agent, how many times in its window."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from breaker.protocol import KeyRow
from console.widgets.cells import clip, plain, ratio_color

__all__ = ["KeysTable"]

COLUMNS = (("count", "count", 7), ("tool", "tool", 12), ("call", "call", 32), ("agent", "agent", 12))


class KeysTable(DataTable):
    """Rebuilt only when the list changed (it is at most a screenful of rows)."""

    DEFAULT_CSS = """
    KeysTable { height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self._shown: list[tuple[Any, ...]] = []
        self.keys: list[KeyRow] = []

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def show(
        self, keys: list[KeyRow], limit_of: Mapping[str, int], exempt: set[str], colors: Mapping[str, str]
    ) -> None:
        signature: list[tuple[Any, ...]] = [
            (k.agent, k.tool, k.preview, k.count, limit_of.get(k.agent, 0)) for k in keys
        ]
        signature.append(tuple(sorted(colors.items())))  # a theme switch recolours
        if signature == self._shown and exempt == getattr(self, "_exempt", None):
            return
        cursor = self.cursor_row
        self._shown, self._exempt, self.keys = signature, set(exempt), list(keys)
        self.clear()
        for i, k in enumerate(keys):
            limit = limit_of.get(k.agent, 0) or 1
            tool_style = colors["exempt"] if k.tool in exempt else ""
            self.add_row(
                Text(f"{k.count}/{limit}", style=ratio_color(k.count / limit, colors), justify="right"),
                plain(clip(k.tool, 12), style=tool_style),
                plain(k.preview),
                plain(clip(k.agent, 12), style=colors["muted"]),
                key=str(i),
            )
        if keys:
            self.move_cursor(row=min(cursor, len(keys) - 1), animate=False, scroll=False)

    def current(self) -> KeyRow | None:
        if not self.keys or self.cursor_row >= len(self.keys):
            return None
        return self.keys[self.cursor_row]
