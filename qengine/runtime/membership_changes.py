"""Who to tell when a cluster's set of live workers changes: a worker lost, or one joined.

A session keeps each of its tables' partitions on two workers (``api.replicas``). It used to
bring them back to two only at the start of its next statement, so an idle connection that lost
one holder of a partition kept a single copy for as long as it stayed idle, and a second loss
minutes later, after the cluster had healed, lost the table. Sessions listen here instead and
copy as soon as the cluster changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("qengine.runtime.membership_changes")


class MembershipChanges:
    """Callbacks run, each in a thread of its own, whenever the live workers change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def listen(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(callback)

    def forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def changed(self) -> None:
        """Tell every listener, without waiting for any: the caller is a watchdog or a join."""
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            threading.Thread(target=self._tell, args=(callback,), name="membership-change", daemon=True).start()

    @staticmethod
    def _tell(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:  # a listener's failure is its own; the cluster goes on
            log.exception("a listener to a change of the cluster's workers failed")
