"""How often CPython's cyclic garbage collector runs in qengine's processes.

Almost everything a query allocates is freed by reference counting; the cyclic collector only
finds what reference counting cannot, yet at its default pace (a young pass every 700
allocations, a full pass whenever the objects that survived grow by a quarter) it walks every
long-lived object of the process again and again. A query's run keeps thousands of small
objects alive on the coordinator until it ends (each task's spec, future and answer): at 10,000
no-op tasks (``bench/scheduler.py``'s query) its passes took 0.6 s of 3.3 s of coordinator CPU,
counted with ``gc.callbacks``. So while queries run, collections are rarer; a worker, whose
process is qengine's alone, keeps that pace all the time.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Young objects collected 50,000 at a time rather than 700; older generations accordingly rarer.
RARE = (50_000, 20, 20)

_lock = threading.Lock()
_running = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def rare_collections() -> Iterator[None]:
    """Collect rarely while any query runs in this process (a coordinator may run several at
    once); the pace set before the first of them comes back when the last one ends."""
    global _running, _saved
    with _lock:
        if _running == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*RARE)
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
