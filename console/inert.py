"""Untrusted text made inert for a terminal: every control and invisible format character shown as an escape.

Agent ids, tool names, arguments, harness names and hosts come from clients of the guard's sockets. Written to a
terminal as they are, a C0 or C1 control sequence (`ESC ]0;…BEL`, `CSI 2J` as the one byte U+009B) retitles
or wipes the operator's screen, and a bidi override (U+202E) makes one id read as another's. What is escaped
is every character of the Unicode categories Cc (C0, DEL, C1), Cf (format: the bidi embeddings, overrides,
isolates and marks, zero-width spaces and joiners, U+FEFF, soft hyphens, tags…), Cs (lone surrogates, which
a terminal's encoder would refuse), Zl and Zp (the line and paragraph separators U+2028, U+2029): each is
non-printable to Python, so text with none of them costs one `str.isprintable()`. No Textual here: the JSON
of an incident report uses it too.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["ESCAPED_CATEGORIES", "escape_char", "inert", "inert_json", "inert_lines", "unsafe"]

ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def unsafe(char: str) -> bool:
    """Whether one character is escaped (its category is one of ESCAPED_CATEGORIES)."""
    return unicodedata.category(char) in ESCAPED_CATEGORIES


def escape_char(char: str) -> str:
    """`\\x1b`, `\\x9b` for a control character (C0, DEL, C1: all below U+0100); `<U+202E>` for the others."""
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 and unicodedata.category(char) == "Cc" else f"<U+{code:04X}>"


def inert(text: str) -> str:
    """`text` with every control and invisible format character written as a visible escape: one line, drawn as
    it reads. Text with none (nearly all) is returned as it is, after one `isprintable()`."""
    if text.isprintable():  # every escaped character is non-printable; a space, a wide glyph, `[red]` are not
        return text
    category = unicodedata.category
    return "".join(escape_char(c) if category(c) in ESCAPED_CATEGORIES else c for c in text)


def inert_lines(text: str) -> str:
    """`inert` for a message of several lines of the console's own (a notice): its line breaks kept."""
    return "\n".join(inert(line) for line in text.split("\n"))


_BEYOND_C0 = re.compile("[^\x00-\x7e]+")  # orjson escapes C0 itself: the rest of what is escaped is DEL or beyond


def inert_json(data: bytes) -> bytes:
    """UTF-8 JSON (orjson's, which writes these characters raw) with every escaped character written as a `\\uXXXX`
    escape: the same data to a JSON reader, nothing live for a terminal that shows the file."""
    text = data.decode()
    if text.isascii() and "\x7f" not in text:
        return data
    return _BEYOND_C0.sub(_json_run, text).encode()


def _json_run(match: re.Match[str]) -> str:
    run = match.group()
    return run if run.isprintable() else "".join(_json_escape(c) if unsafe(c) else c for c in run)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
