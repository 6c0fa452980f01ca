"""Deterministic fault injection for the recovery tests: make one worker fail at a named phase.

Real signals (``bench/chaos.py``) hit a task wherever it happens to be; a test needs the same
failure every run. ``QENGINE_FAULT`` names the worker, the phase and what to do there, e.g.
``worker=1;phase=map;after=2;action=exit``:

- ``phase``: ``task`` (a task starts), ``map`` (a task has stored shuffle output, before it
  replies), ``push`` (a push of blocks to reducers' hosts starts), ``reduce`` (a task has loaded
  its shuffle inputs, before its fragment runs), ``materialize`` (a task has stored a shared
  CTE's partition, before it replies);
- ``after``: act the n-th time this worker reaches the phase (default 1);
- ``action``: ``exit`` (the process ends at once, as under SIGKILL), ``stop`` (it stops itself,
  as under SIGSTOP: a hung worker), ``slow`` (every task from then on first sleeps ``seconds``).

Only the worker whose id is ``worker`` acts; a local cluster numbers its replacement workers
past the first ones, so a replacement never inherits the fault.
"""

from __future__ import annotations

import os
import signal
import threading
import time

ENV = "QENGINE_FAULT"
PHASES = ("task", "map", "push", "reduce", "materialize")


class FaultPlan:
    """The fault this process was started with, if any; ``reached`` is called at each phase."""

    def __init__(self, text: str | None) -> None:
        fields = dict(part.split("=", 1) for part in (text or "").split(";") if "=" in part)
        self.worker = int(fields["worker"]) if "worker" in fields else None
        self.phase = fields.get("phase", "task")
        self.after = int(fields.get("after", "1"))
        self.action = fields.get("action", "exit")
        self.seconds = float(fields.get("seconds", "1"))
        if self.phase not in PHASES or self.action not in ("exit", "stop", "slow"):
            raise ValueError(f"{ENV}: unknown phase or action in {text!r}")
        self._count = 0
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> FaultPlan | None:
        text = os.environ.get(ENV)
        return cls(text) if text else None

    def reached(self, phase: str, worker_id: int) -> None:
        """Act if this is the phase, the worker and the time the plan names."""
        if phase != self.phase or worker_id != self.worker:
            return
        with self._lock:
            self._count += 1
            count = self._count
        if count < self.after:
            return
        if self.action == "exit":
            os._exit(17)
        elif self.action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        else:
            time.sleep(self.seconds)
