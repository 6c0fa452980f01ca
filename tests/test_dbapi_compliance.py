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
    connect_kw_args = {"workers": 1, "lazy_start": True}

    def test_nextset(self) -> None:
        """qengine has no multiple result sets: by the suite's convention (its own
        ``test_nextset`` returns when a cursor has no ``nextset``) a cursor has no nextset."""
        con = self._connect()
        try:
            assert not hasattr(con.cursor(), "nextset")
        finally:
            con.close()

    def test_setoutputsize(self) -> None:
        """setoutputsize is accepted and ignored, as PEP 249 allows: nothing fetched is cut short."""
        con = self._connect()
        try:
            cur = con.cursor()
            self.executeDDL1(cur)
            cur.setoutputsize(3, 0)
            cur.execute(f"{self.insert} into {self.table_prefix}booze values ('Victoria Bitter')")
            cur.setoutputsize(3)
            cur.execute(f"select name from {self.table_prefix}booze")
            assert cur.fetchall() == [("Victoria Bitter",)]
        finally:
            con.close()
