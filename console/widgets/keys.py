"""The top repeated keys: which call, by which agent, how many times in its window."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping

from rich.text import Text

from breaker.protocol import KeyRow
from console.widgets.cells import clip, plain, ratio_color
from console.widgets.rows import KeyedTable, keyed

__all__ = ["KeysTable", "row_keys"]


def row_keys(keys: list[KeyRow]) -> list[str]:
    """A stable row key per repeated call: its agent, tool and preview (a second call with the same
    three, possible when previews are cut short, gets `#2`)."""
    seen: Counter[str] = Counter()
    out = []
    for k in keys:
        base = f"{k.agent}\x00{k.tool}\x00{k.preview}"
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}\x00#{seen[base]}")
    return out


class KeysTable(KeyedTable):
    """Reconciled by key like the agents table: the cursor stays on the same call as counts move."""

    DEFAULT_CSS = """
    KeysTable { height: 1fr; }
    """
    COLUMNS = (("count", "count", 7), ("tool", "tool", 12), ("call", "call", 32), ("agent", "agent", 12))
    KEY_COLUMN = "call"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._rows: dict[str, KeyRow] = {}

    def show(
        self,
        keys: list[KeyRow],
        limit_of: Mapping[str, int],
        exempt_of: Mapping[str, Collection[str]],
        colors: Mapping[str, str],
        name_of: Callable[[str], str] = str,
    ) -> None:
        """`keys` as rows; by each key's agent: its duplicate limit, the tools its guard exempts, how it is named."""
        palette = tuple(colors.values())
        self._rows = dict(zip(row_keys(keys), keys, strict=True))
        limits = {key: limit_of.get(k.agent) or 1 for key, k in self._rows.items()}  # 1: its agent is gone
        exempt = {key: k.tool in exempt_of.get(k.agent, ()) for key, k in self._rows.items()}

        def render(key: str) -> tuple[Text, ...]:
            k, limit = self._rows[key], limits[key]
            return (
                Text(f"{k.count}/{limit}", style=ratio_color(k.count / limit, colors), justify="right"),
                plain(clip(k.tool, 12), style=colors["exempt"] if exempt[key] else ""),
                keyed(plain(k.preview), key),
                plain(clip(name_of(k.agent), 12), style=colors["muted"]),
            )

        rows = [(key, (k.count, limits[key], exempt[key], palette)) for key, k in self._rows.items()]
        self.show_rows(rows, render)

    def current(self) -> KeyRow | None:
        """The repeated call under the cursor."""
        return self._rows.get(self.selected) if self.selected is not None else None
