"""``in_session``: what a command prints and its status reach the program that ran it."""

from __future__ import annotations

import subprocess

from tests.conformance.in_session import command_server


def test_a_commands_output_and_status_reach_the_caller() -> None:
    with command_server() as ackstate:
        usage = subprocess.run([*ackstate, "--help"], capture_output=True, text=True, timeout=60)
        wrong = subprocess.run(
            [*ackstate, "stats", "--no-such-option"], capture_output=True, text=True, timeout=60
        )
    assert usage.returncode == 0 and "internal-stats" in usage.stdout, usage
    assert wrong.returncode == 2, wrong
    assert "unrecognized arguments: --no-such-option" in wrong.stderr, wrong
