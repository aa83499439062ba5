"""The console installs anywhere: the wheel carries every module and data file the console reads, and a
fresh virtual environment holding only the wheel (what `pipx install` or `uv tool install` makes) runs
the console with each shipped theme; `--theme` with an unknown name says which themes there are."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

# pip builds the wheel and fills the fresh venv from PyPI; one worker builds both (xdist's loadgroup).
pytestmark = [pytest.mark.registry, pytest.mark.xdist_group("install")]

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.stem for p in (ROOT / "themes").glob("*.yaml"))
PACKAGES = ("breaker", "console")  # the source trees the wheel installs (the themes come from themes/)

# Run by the fresh environment's Python, outside the repository: the console with one theme, as in
# `cbconsole --demo --theme NAME`, driven headless until the demo's agents are on screen.
RUN_WITH_THEME = """
import asyncio, json, sys

import console
from console.app import CBConsole
from console.session import DemoGuard


async def main(name: str) -> None:
    app = CBConsole(DemoGuard(), theme=name)
    async with app.run_test() as pilot:
        try:
            for _ in range(300):
                if app.state.agents:
                    break
                await pilot.pause(0.05)
            seen = {
                "console": console.__file__,
                "theme": app.theme,
                "trip": app.get_css_variables()["trip"],
                "errors": app.theme_errors,
                "agents": len(app.state.agents),
            }
        finally:
            await pilot.press("q")  # quitting stops the demo's guard and agents
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1]))
"""


def run(*cmd: str | Path, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    args = [str(c) for c in cmd]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)


def checked(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def cbconsole(venv: Path, tmp_path: Path) -> list[str | Path]:
    """The installed command, attached to a socket nobody serves: were the screen to start, no guard would."""
    return [venv / "bin" / "cbconsole", "--attach", "--socket", tmp_path / "guard.sock"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the source tree (a build leaves build/ and *.egg-info behind)."""
    source = tmp_path_factory.mktemp("source") / "cbconsole"
    skip = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "tests")
    shutil.copytree(ROOT, source, ignore=skip)
    out = tmp_path_factory.mktemp("wheel")
    checked(run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, source))
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel and its dependencies (from PyPI, or pip's cache)."""
    env = tmp_path_factory.mktemp("venv") / "env"
    checked(run(sys.executable, "-m", "venv", env))
    checked(run(env / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel))
    return env


def test_wheel_carries_every_module_and_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        p.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for p in (ROOT / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    expected |= {f"console/shipped_themes/{name}.yaml" for name in SHIPPED}
    assert {"console/console.tcss", "breaker/dsh_plugin/index.mjs", "console/shipped_themes/light.yaml"} <= expected
    assert sorted(expected - names) == []
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == set(PACKAGES)  # never a top-level `themes`


@pytest.mark.parametrize("name", SHIPPED)
def test_installed_console_runs_with_each_shipped_theme(venv: Path, name: str, tmp_path: Path) -> None:
    script = tmp_path / "run_with_theme.py"
    script.write_text(RUN_WITH_THEME)
    seen = json.loads(checked(run(venv / "bin" / "python", script, name, cwd=tmp_path)).stdout)
    site = venv.resolve()
    assert Path(seen["console"]).resolve().is_relative_to(site), "the console ran from the repository"
    expected = yaml.safe_load((ROOT / "themes" / f"{name}.yaml").read_text(encoding="utf-8"))
    assert seen["theme"] == expected["name"] == f"cbconsole-{name}"  # not the fallback
    assert seen["trip"] == expected["variables"]["trip"]
    assert seen["errors"] == []
    assert seen["agents"] > 0, "the demo's guard and agents never showed up"


def test_unknown_theme_exits_before_the_screen_and_lists_the_themes(venv: Path, tmp_path: Path) -> None:
    proc = run(*cbconsole(venv, tmp_path), "--theme", "nosuch", timeout=30, cwd=tmp_path)
    assert proc.returncode == 2
    user_dir = Path(os.environ["XDG_CONFIG_HOME"]) / "cbconsole" / "themes"
    assert (
        f"cbconsole: error: no theme 'nosuch'; available: {', '.join(SHIPPED)} (your own go in {user_dir}/NAME.yaml)"
        in proc.stderr
    )
    assert proc.stdout == ""


def test_unknown_theme_lists_the_users_themes_and_the_broken_ones(venv: Path, tmp_path: Path) -> None:
    user_dir = tmp_path / "config" / "cbconsole" / "themes"
    user_dir.mkdir(parents=True)
    solarized = yaml.safe_load((ROOT / "themes" / "light.yaml").read_text(encoding="utf-8")) | {"name": "solarized"}
    (user_dir / "solarized.yaml").write_text(yaml.safe_dump(solarized))
    (user_dir / "broken.yaml").write_text("name: broken\nprimary: not-a-colour\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = run(*cbconsole(venv, tmp_path), "--theme", "broken", timeout=30, cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert f"no theme 'broken'; available: {', '.join([*SHIPPED, 'solarized'])}" in proc.stderr
    assert f"{user_dir / 'broken.yaml'}: primary: 'not-a-colour' is not a colour" in proc.stderr
