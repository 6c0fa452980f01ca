"""Stopping the processes a command started: whoever spawns a process stops it."""

from __future__ import annotations

import contextlib
import signal
import subprocess

STOP_SECONDS = 10.0  # how long a process has to exit once asked, before it is killed


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process, then wait for it (SIGKILL after :data:`STOP_SECONDS`); never raises."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout:
            p.stdout.close()
