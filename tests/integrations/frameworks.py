"""A venv per agent framework (with cbconsole and its extra) in the git-ignored cache, for the integration tests.

`python -m tests.integrations.frameworks install [langgraph openai-agents pydantic-ai smolagents crewai]`
installs (all by default) and prints how long each took. The five cannot share one venv (CrewAI 1.15
needs openai < 3, the OpenAI Agents SDK 0.24 openai >= 3), and none of them may disturb the suite's
own pins (textual, pytest < 9): each gets `.cache/frameworks/<extra>/`, made by `pip install
'cbconsole[<extra>]'` from this checkout, so the pins are the extras' in pyproject.toml (one source).
The checkout's own `breaker` comes first on the scenarios' PYTHONPATH, so the tests run the code as it
is now, not the copy installed. A venv is reused while its stamp matches the pins; an install is
built beside it and moved into place only once it imports; PyPI out of reach raises `InstallError`
with pip's own words, and the command exits 1. The tests never install: they ask with `install=False`
(`NotInstalled` when a venv is missing) and skip saying so, or fail under `CI=true` (docs/testing.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.harnesses import (
    CACHE,
    InstallError,
    NotInstalled,
    _fresh_dir,
    _locked,
    _promote,
    _stamp_ok,
    _write_stamp,
)

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT = 1800  # seconds for one install; CrewAI's cold install is the longest (about 2.5 min here)

# extra -> the module that proves the install imports
FRAMEWORKS = {
    "langgraph": "langchain.agents",
    "openai-agents": "agents",
    "pydantic-ai": "pydantic_ai",
    "smolagents": "smolagents",
    "crewai": "crewai",
}


@dataclass(frozen=True)
class Framework:
    """An installed framework venv."""

    extra: str
    python: Path
    pins: tuple[str, ...]
    seconds: float = 0.0  # how long ensure() took here (0 when reused)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The scenario's environment: the checkout first on the path, no model-client variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "CBCONSOLE_"))}
        env.update(
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            OPENAI_AGENTS_DISABLE_TRACING="1",  # the SDK would export traces to OpenAI's servers
            CREWAI_DISABLE_TELEMETRY="true",  # CrewAI's telemetry and tracing would call out
            CREWAI_TRACING_ENABLED="false",
            OTEL_SDK_DISABLED="true",
            HF_HUB_OFFLINE="1",
        )
        env.update(extra or {})
        return env


def pins(extra: str) -> tuple[str, ...]:
    """The extra's requirements as pyproject.toml pins them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = project["optional-dependencies"].get(extra)
    if not found:
        raise InstallError(f"pyproject.toml has no extra {extra!r} (known: {', '.join(FRAMEWORKS)})")
    return tuple(found)


def venv_dir(extra: str) -> Path:
    return CACHE / "frameworks" / extra


def _pip(python: Path, args: list[str], what: str, log: Path) -> None:
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        with open(log, "a") as out:
            proc = subprocess.run(
                [str(python), "-m", "pip", *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=PIP_TIMEOUT,
            )
    except subprocess.TimeoutExpired as e:
        raise InstallError(f"pip did not install {what} within {PIP_TIMEOUT} s (is PyPI reachable?); log: {log}") from e
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise InstallError(
            f"pip could not install {what} (exit {proc.returncode}); log: {log}\n--- last lines ---\n{tail}"
        )


def ensure(extra: str, install: bool = True) -> Framework:
    """The framework's venv, installed if missing or if its pins changed (`install=False`: `NotInstalled`)."""
    if extra not in FRAMEWORKS:
        raise InstallError(f"unknown framework {extra!r} (known: {', '.join(FRAMEWORKS)})")
    wanted = pins(extra)
    spec = {"extra": extra, "pins": list(wanted), "python": sys.version.split()[0]}
    final = venv_dir(extra)
    python = final / "bin" / "python"
    if _stamp_ok(final, spec) and python.exists():
        return Framework(extra, python, wanted)
    if not install:
        raise NotInstalled(f"the {extra} venv (not in {final})")
    with _locked(f"framework-{extra}"):
        if _stamp_ok(final, spec) and python.exists():
            return Framework(extra, python, wanted)
        started = time.monotonic()
        staging = _fresh_dir(final)
        log = staging / "pip.log"
        subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True, timeout=300)
        _pip(staging / "bin" / "python", ["install", "--quiet", "--upgrade", "pip"], "pip", log)
        _pip(staging / "bin" / "python", ["install", "--quiet", f"{ROOT}[{extra}]"], f"cbconsole[{extra}]", log)
        probe = subprocess.run(
            [str(staging / "bin" / "python"), "-c", f"import {FRAMEWORKS[extra]}, breaker.client"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if probe.returncode != 0:
            raise InstallError(f"{extra}: installed, but `import {FRAMEWORKS[extra]}` failed:\n{probe.stderr[-2000:]}")
        seconds = time.monotonic() - started
        _write_stamp(staging, spec, json.dumps(list(wanted)), seconds)
        _promote(staging, final)
        return Framework(extra, python, wanted, seconds)


def main(argv: list[str] | None = None) -> int:
    args = (argv if argv is not None else sys.argv[1:]) or ["install"]
    if args[0] != "install":
        print("usage: python -m tests.integrations.frameworks install [" + " ".join(FRAMEWORKS) + "]", file=sys.stderr)
        return 2
    total = 0.0
    for extra in args[1:] or list(FRAMEWORKS):
        try:
            fw = ensure(extra)
        except InstallError as e:
            print(f"INSTALL FAILED: {e}", file=sys.stderr)
            return 1
        total += fw.seconds
        how = f"installed in {fw.seconds:.1f} s" if fw.seconds else "cached"
        print(f"[frameworks] {extra}: {how} ({fw.python})")
    print(f"[frameworks] total {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
