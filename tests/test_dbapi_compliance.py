"""The DB-API 2.0 compliance suite (package ``dbapi-compliance``) against a local cluster.

The suite connects afresh for almost every test; with ``lazy_start`` a connection's one worker
starts only when a statement needs it, so the tests that only look at the module or the
connection cost no process, and the suite runs on real, separate connections throughout.
"""

from __future__ import annotations

import dbapi20

import qengine


class TestQengineCompliance(dbapi20.DatabaseAPI20Test):
    driver = qengine
    connect_args = ()
    connect_kw_args = {"workers": 1, "lazy_start": True}  # noqa: RUF012 - the suite's own attribute
