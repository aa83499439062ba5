"""A line of text redrawn ten times a second: drawn again only when its text changed, never laid out again."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

__all__ = ["Line"]


class Line(Static):
    """A Static whose height its CSS fixes (a title, a head). `show` skips a text equal to the one shown, and
    never asks for a layout: `Static.update` reflows the whole screen each time, which at 10 Hz was a good part
    of a busy console's time."""

    def __init__(self, text: Text | None = None, **kwargs: object) -> None:
        super().__init__(text if text is not None else Text(), **kwargs)  # type: ignore[arg-type]
        self._text = text if text is not None else Text()

    def show(self, text: Text) -> None:
        old = self._text
        if text.plain == old.plain and text.spans == old.spans and text.style == old.style:
            return
        self._text = text
        self.update(text, layout=False)

    @property
    def text(self) -> Text:
        """The text shown."""
        return self._text
