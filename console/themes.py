"""Themes as data files: the shipped ones (`themes/*.yaml`, installed as the package `console.shipped_themes`)
and the user's own, turned into Textual themes, every error reported."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from textual.color import Color, ColorParseError
from textual.theme import Theme

__all__ = ["THEME_VARIABLES", "ThemeLoad", "load_themes", "theme_dirs", "user_theme_dir"]

# The console's own colour roles; every theme must give them (the dark theme's values are the fallback).
THEME_VARIABLES = {
    "trip": "#ff6b6b",
    "cap": "#ff9f45",
    "interrupted": "#c586e8",
    "ok": "#76c893",
    "warn": "#e5c07b",
    "exempt": "#5fc4e0",
    "muted": "#7d8794",
}
_COLOR_FIELDS = (
    "primary",
    "secondary",
    "accent",
    "warning",
    "error",
    "success",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
_KNOWN = {"name", "dark", "variables", "luminosity_spread", "text_alpha", *_COLOR_FIELDS}


# The console's own themes are named `cbconsole-<short>`; the operator says the short name.
PREFIX = "cbconsole-"


@dataclass
class ThemeLoad:
    themes: dict[str, Theme] = field(default_factory=dict)  # by name, in load order
    errors: list[str] = field(default_factory=list)

    def find(self, name: str) -> str | None:
        """The loaded theme `name` stands for (`light` is `cbconsole-light`), or None."""
        return next((n for n in (name, PREFIX + name) if n in self.themes), None)

    def short_names(self) -> list[str]:
        """Every loaded theme as the operator would name it, sorted."""
        return sorted(n.removeprefix(PREFIX) for n in self.themes)


def user_theme_dir() -> Path:
    """`$XDG_CONFIG_HOME/cbconsole/themes`: the user's own themes, which may override the shipped ones."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "cbconsole" / "themes"


def theme_dirs() -> list[Traversable]:
    """The shipped themes (package data, so an installed console has them too), then the user's."""
    return [files("console.shipped_themes"), user_theme_dir()]


def _color(value: Any, where: str, errors: list[str]) -> str | None:
    if not isinstance(value, str):
        errors.append(f"{where}: expected a colour string, found {type(value).__name__}")
        return None
    try:
        Color.parse(value)
    except ColorParseError:
        errors.append(f"{where}: {value!r} is not a colour")
        return None
    return value


def parse_theme(data: Any, source: str) -> tuple[Theme | None, list[str]]:
    errors: list[str] = []
    if not isinstance(data, dict):
        return None, [f"{source}: expected a mapping of theme settings"]
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        errors.append(f"{source}: name: expected a non-empty string")
    for key in data:
        if key not in _KNOWN:
            errors.append(f"{source}: {key}: not a theme setting (known: {', '.join(sorted(_KNOWN))})")
    colors = {}
    for key in _COLOR_FIELDS:
        if key in data:
            colors[key] = _color(data[key], f"{source}: {key}", errors)
    if "primary" not in data:
        errors.append(f"{source}: primary: required")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        errors.append(f"{source}: dark: expected true or false")
    variables: dict[str, str] = {}
    raw_vars = data.get("variables", {}) or {}
    if not isinstance(raw_vars, dict):
        errors.append(f"{source}: variables: expected a mapping")
        raw_vars = {}
    for key, value in raw_vars.items():
        color = _color(value, f"{source}: variables.{key}", errors)
        if color is not None:
            variables[str(key)] = color
    missing = [k for k in THEME_VARIABLES if k not in variables]
    if missing:
        errors.append(f"{source}: variables: missing {', '.join(missing)}")
    if errors:
        return None, errors
    present: dict[str, Any] = {k: v for k, v in colors.items() if v}
    theme = Theme(name=str(name).strip(), dark=bool(dark), variables=variables, **present)
    return theme, []


def load_themes(dirs: list[Traversable] | None = None) -> ThemeLoad:
    """Every `*.yaml` theme in `dirs`; a broken one is skipped and its errors reported (all of them)."""
    result = ThemeLoad()
    for directory in dirs if dirs is not None else theme_dirs():
        if not directory.is_dir():
            continue
        for path in sorted((p for p in directory.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name):
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                result.errors.append(f"{path}: cannot be read: {exc}")
                continue
            theme, errors = parse_theme(data, str(path))
            result.errors.extend(errors)
            if theme is not None:
                result.themes[theme.name] = theme
    return result
