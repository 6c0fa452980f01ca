"""The data-access policy: which directories a cluster may read data from and write COPY output to.

Every path is resolved with ``realpath`` before it is compared with the roots, so neither ``..``
nor a symbolic link leads out of them. The coordinator checks a path when a statement names it;
the worker that opens the file checks it again, against the policy its task carries and, on a
standalone cluster, against the roots its coordinator gave it when it joined, so a link swapped
in after planning, or a task sent to the worker directly, cannot escape either.

COPY writes only into a directory it creates, or into one holding nothing but an earlier
COPY's output: it leaves a marker file naming the part files it wrote, and OVERWRITE deletes
only those.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from qengine.errors import OperationalError, ProgrammingError

# The file COPY leaves in its output directory. Names starting with "_" are skipped when a
# directory is registered, so the marker is never read as data.
MARKER = "_qengine_copy.json"
# The formats of the part files a COPY's tasks write (``part-00000.parquet``).
PART_FORMATS = ("csv", "parquet")
_PART = re.compile(rf"part-\d{{5}}\.({'|'.join(PART_FORMATS)})")
_ATTEMPT = re.compile(rf"\.part-\d{{5}}\.({'|'.join(PART_FORMATS)})\.attempt-\d+\.tmp")


def real(path: str) -> str:
    """``path`` with ``~``, ``..`` and every symbolic link resolved."""
    if "\x00" in path:  # the file system's calls raise ValueError, which reached users as internal
        raise ProgrammingError(f"{path!r}: a path cannot hold a NUL character")
    return os.path.realpath(os.path.expanduser(path))


def inside(path: str, roots: Iterable[str]) -> bool:
    """Whether the resolved ``path`` lies at or below one of the (resolved) ``roots``."""
    return any(os.path.commonpath([path, root]) == root for root in roots)


@dataclass(frozen=True)
class AccessPolicy:
    """Roots for reading and for writing, each a tuple of resolved directories."""

    read_roots: tuple[str, ...]
    write_roots: tuple[str, ...]

    @classmethod
    def of(cls, read_roots: Iterable[str], write_roots: Iterable[str]) -> AccessPolicy:
        return cls(tuple(dict.fromkeys(map(real, read_roots))), tuple(dict.fromkeys(map(real, write_roots))))

    def to_json(self) -> dict[str, list[str]]:
        return {"read": list(self.read_roots), "write": list(self.write_roots)}

    @classmethod
    def from_json(cls, body: dict) -> AccessPolicy:
        return cls(tuple(body.get("read") or ()), tuple(body.get("write") or ()))

    def check_read(self, path: str, extra_roots: Iterable[str] = ()) -> str:
        """The resolved ``path`` if it may be read, else ProgrammingError naming the roots."""
        resolved = real(path)
        roots = (*self.read_roots, *extra_roots)
        if not inside(resolved, roots):
            raise ProgrammingError(f"{_shown(path, resolved, roots)} is outside the data roots {list(roots)}")
        return resolved

    def check_write(self, directory: str) -> str:
        """The resolved ``directory`` if COPY may write there, else ProgrammingError."""
        resolved = real(directory)
        if not self.write_roots:
            raise ProgrammingError("this cluster has no output roots, so COPY cannot write anywhere "
                                   "(start the coordinator with --output-root DIR)")
        if not inside(resolved, self.write_roots):
            raise ProgrammingError(f"{_shown(directory, resolved, self.write_roots)} is outside the output roots {list(self.write_roots)}")
        return resolved


def _shown(path: str, resolved: str, roots: Iterable[str]) -> str:
    """How to name a refused path: as given, and where it really leads if that differs and the
    link lies inside the roots (outside them, where links lead is not the user's to learn)."""
    given = os.path.abspath(os.path.expanduser(path))
    return given if given == resolved or not inside(given, roots) else f"{given} (which leads to {resolved})"


def check_opened(path: str, policies: Iterable[AccessPolicy], write: bool = False) -> None:
    """A worker's check right before it opens ``path``: the path the coordinator resolved must
    still be the real one (not since swapped for a link) and lie inside every policy's roots."""
    resolved = os.path.realpath(path)
    if resolved != path:
        raise ProgrammingError(f"{path} changed after the query was planned: it now leads to {resolved}")
    for policy in policies:
        roots = policy.write_roots if write else policy.read_roots
        if not inside(resolved, roots):
            kind = "output" if write else "data"
            raise ProgrammingError(f"{path} is outside the {kind} roots {list(roots)}")


def claim_output(directory: str, overwrite: bool) -> None:
    """Make ``directory`` (already resolved and checked) COPY's own, before any part is written.

    A new directory is created. An existing one must be empty, or hold only an earlier COPY's
    files as its marker lists them; with ``overwrite`` those are deleted, never anything else.
    """
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise ProgrammingError(f"{directory} is a file; COPY writes a directory of part files")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise OperationalError(f"cannot create {directory}: {e.strerror}") from e
    entries = set(os.listdir(directory))
    if entries:
        ours = set(_listed(directory))
        foreign = sorted(entries - ours - {MARKER})
        if MARKER not in entries or foreign:
            raise ProgrammingError(
                f"{directory} is not empty and holds files COPY did not write ({(foreign or sorted(entries))[0]}, …): "
                "COPY writes only into a new directory or one holding its own earlier output"
            )
        if not overwrite:
            raise ProgrammingError(f"{directory} is not empty: it holds an earlier COPY's output (add OVERWRITE true to replace it)")
        for name in sorted(ours & entries):
            os.unlink(os.path.join(directory, name))
    _write_marker(directory, [])


def attempt_file(part: str, attempt: int) -> str:
    """The hidden name one task attempt writes its part file under, before renaming it."""
    return f".{part}.attempt-{attempt}.tmp"


def record_output(directory: str) -> None:
    """List in the marker the part files now in ``directory``: after a COPY has run (or failed),
    they are its own, since it claimed the directory with nothing else in it. Files of attempts
    that never finished (their worker was lost) are removed."""
    entries = os.listdir(directory)
    for name in entries:
        if _ATTEMPT.fullmatch(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
    _write_marker(directory, sorted(n for n in entries if _PART.fullmatch(n)))


def _listed(directory: str) -> list[str]:
    try:
        with open(os.path.join(directory, MARKER)) as f:
            files = json.load(f).get("files", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in files if isinstance(n, str) and _PART.fullmatch(n)]


def _write_marker(directory: str, files: list[str]) -> None:
    """Write the marker through a file of its own: created here, never followed (a link planted
    at its name made ``open`` overwrite the file it led to, outside every root)."""
    path = os.path.join(directory, MARKER)
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump({"writer": "qengine COPY", "files": files}, f)
    os.replace(tmp, path)
