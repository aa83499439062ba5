"""`cbconsole setup …` and `cbconsole doctor …`: the two commands `breaker.cli` hands over, unparsed."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    """`argv` starts with the command's name ("setup" or "doctor")."""
    if argv[0] == "setup":
        from breaker.wiring.setup import main as setup

        return setup(argv[1:])
    from breaker.wiring.doctor import main as doctor

    return doctor(argv[1:])
