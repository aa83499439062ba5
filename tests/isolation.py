"""Every test's own HOME and XDG directories, and the check that the run left the real HOME as it was.

The session itself runs with a HOME of its own from `pytest_configure` on (so test modules imported at
collection, session fixtures and every child process see it), and each test gets a fresh one on top.
`HomeRecord` is taken of the real HOME before anything runs and again at the end; the run fails if they
differ (docs/testing.md says what it looks at, and why not at everything).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from breaker.wiring.harnesses import Places

# What a test must not inherit from the developer's shell: each would point a test at the user's own guard,
# dsh home or harness settings instead of its private ones.
UNSET = (
    "CBCONSOLE_SOCKET",
    "CBCONSOLE_OPERATOR_SOCKET",
    "DSH_HOME",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "GEMINI_CLI_HOME",
)


def private_env(base: Path) -> dict[str, str]:
    """HOME and every XDG base directory under `base`, made; the runtime directory 0700 as the XDG spec says
    (it decides the guard's default socket, so no two tests share one)."""
    home = base / "home"
    dirs = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_RUNTIME_DIR": base / "run",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    dirs["XDG_RUNTIME_DIR"].chmod(0o700)
    return {name: str(path) for name, path in dirs.items()}


def pip_env(real: Mapping[str, str], cache: Path) -> dict[str, str]:
    """pip, when a test runs it (the `registry` tier), keeps the user's own configuration (their index) and
    caches into the git-ignored cache instead of the real HOME's."""
    env = {"PIP_CACHE_DIR": str(cache / "pip")}
    if "PIP_CONFIG_FILE" not in real:
        home = real_home(real)
        config = Path(real.get("XDG_CONFIG_HOME") or home / ".config")
        for candidate in (config / "pip" / "pip.conf", home / ".pip" / "pip.conf"):
            if candidate.is_file():
                env["PIP_CONFIG_FILE"] = str(candidate)
                break
    return env


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def loopback_env(real: Mapping[str, str]) -> dict[str, str]:
    """The tests' servers (the fake model, the metrics endpoint, the OTLP receiver) are on loopback: a proxy the
    user set for the internet (`http_proxy`, `HTTPS_PROXY`) must not be asked for them. Both spellings of
    `no_proxy` get loopback added to what the user had (Python, pip and curl read the lower case, Node tools
    either)."""
    had = [part for name in ("no_proxy", "NO_PROXY") for part in real.get(name, "").split(",") if part.strip()]
    value = ",".join(dict.fromkeys([*had, *LOOPBACK]))
    return {"no_proxy": value, "NO_PROXY": value}


def real_home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir)


class HomeRecord:
    """Where in the real HOME a test that leaked would write, as it is now.

    Counted as a change: an entry that appears or disappears directly in HOME, in any of its dot
    directories, or in the XDG data, state, config and cache directories; anything that appears or
    disappears under cbconsole's own config and state directories; a change of any kind to the files
    `cbconsole setup` writes (each harness's settings, Codex's config.toml, dsh's patch layers) and to
    cbconsole's keymap and themes. Not counted: files that other programs keep changing in place
    (shell history, editors' and browsers' state), and the checkout, the cache and the temp directory.
    """

    def __init__(self, environ: Mapping[str, str], skip: Iterable[Path]) -> None:
        self.home = home = real_home(environ)
        # A place to skip that holds HOME itself (a HOME in the temp directory) is looked into all the same.
        real = Path(os.path.realpath(home))
        self.skip = [s for s in map(Path, map(os.path.realpath, skip)) if not real.is_relative_to(s)]
        places = Places.of(home=str(home), environ=environ)
        config = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        state = Path(environ.get("XDG_STATE_HOME") or home / ".local" / "state")
        data = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")
        cache = Path(environ.get("XDG_CACHE_HOME") or home / ".cache")
        self.seen: dict[str, tuple[int, int] | None] = {}  # path -> (size, mtime) when its content counts too

        dot_dirs = [p for p in self._children(home) if p.name.startswith(".") and p.is_dir() and not p.is_symlink()]
        for directory in (home, *dot_dirs, config, state, data, cache):
            self._names(self._children(directory))
        self._names(self._tree(state / "cbconsole"))
        self._contents(self._tree(config / "cbconsole"))
        layers = [places.dsh_layer(), *places.dsh_home().glob("profiles/*/cordis.patch.yml")]
        settings = [places.settings_file(h) for h in ("claude-code", "codex", "gemini", "cursor")]
        self._contents([*layers, *settings, places.codex_home() / "config.toml"])
        runtime = environ.get("XDG_RUNTIME_DIR")
        if runtime:
            self._names(p for p in self._children(Path(runtime)) if p.name.startswith("cbconsole"))

    def _skipped(self, path: Path) -> bool:
        real = Path(os.path.realpath(path))
        return any(real == s or real.is_relative_to(s) for s in self.skip)

    def _children(self, directory: Path) -> list[Path]:
        try:
            return [Path(entry.path) for entry in os.scandir(directory)]
        except OSError:
            return []

    def _tree(self, directory: Path) -> Iterator[Path]:
        for parent, dirs, files in os.walk(directory):
            for name in dirs + files:
                yield Path(parent) / name

    def _names(self, paths: Iterable[Path]) -> None:
        for path in paths:
            if not self._skipped(path):
                self.seen.setdefault(str(path), None)

    def _contents(self, paths: Iterable[Path]) -> None:
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                continue  # not there: its appearing shows as a new name in its parent, or in the next record
            if not self._skipped(path):
                self.seen[str(path)] = (st.st_size, st.st_mtime_ns)

    def changes(self, later: HomeRecord) -> list[str]:
        """What differs in `later`, one line each."""
        lines = [f"new      {p}" for p in sorted(later.seen.keys() - self.seen.keys())]
        lines += [f"removed  {p}" for p in sorted(self.seen.keys() - later.seen.keys())]
        lines += [
            f"changed  {p}"
            for p in sorted(self.seen.keys() & later.seen.keys())
            if self.seen[p] is not None and later.seen[p] is not None and self.seen[p] != later.seen[p]
        ]
        return lines
