"""The catalog: named tables and views, and the data roots file access is confined to.

Each table is a :mod:`qengine.catalog.sources` source; views keep their parsed query and are
expanded by the planner's frontend.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import pathlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import sqlglot.expressions as exp

from qengine.catalog.access import AccessPolicy, real
from qengine.catalog.sources import ParquetSource, Source
from qengine.errors import Error, NotSupportedError, OperationalError, ProgrammingError


@dataclass
class View:
    name: str
    query: exp.Expression
    # (name, DuckDB type) of its columns when it was made: what listings show of it once a
    # table it reads is gone, as DuckDB's do
    columns: tuple[tuple[str, str], ...] = ()


@dataclass
class Catalog:
    """Tables and views by lower-cased name, and the access policy file reads are confined to.

    With ``extendable`` (a local cluster given no roots) registering a file explicitly also
    lets SQL read below its directory; otherwise only the policy's roots count.
    """

    policy: AccessPolicy = field(default_factory=lambda: AccessPolicy.of([os.getcwd()], [os.getcwd()]))
    extendable: bool = True
    registered_roots: list[str] = field(default_factory=list)
    tables: dict[str, Source] = field(default_factory=dict)
    views: dict[str, View] = field(default_factory=dict)
    # Bumped by every change a plan could depend on: plans are reused only within one version.
    version: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # tables whose changed files failed to read, with what the files were then (``refresh``)
    _unreadable: dict[str, tuple[tuple, Error]] = field(default_factory=dict)
    # What the calling thread's statement finds a table the catalog lacks by (``finding``).
    _finders: threading.local = field(default_factory=threading.local)

    @contextlib.contextmanager
    def finding(self, find: Callable[[str], exp.Query | None]) -> Iterator[None]:
        """While the block runs, let the calling thread's statement read a table the catalog
        does not have as the query ``find`` gives for its name (sources already expanded), or
        fail as unknown where it gives None: DuckDB's replacement scans (``api.replacement_scans``)."""
        outer = getattr(self._finders, "find", None)
        self._finders.find = find
        try:
            yield
        finally:
            self._finders.find = outer

    def unknown_table(self, name: str) -> exp.Query | None:
        """What the calling thread's statement reads for ``name``, a table the catalog lacks."""
        find = getattr(self._finders, "find", None)
        return None if find is None else find(name)

    def add_root(self, spec: str) -> None:
        """Let SQL table functions (read_parquet, read_csv) read a registered file, or below a
        registered directory or glob's directory; where the roots are fixed, it must already
        lie inside them."""
        root = _root_of(spec)
        if not self.extendable:
            self.policy.check_read(root)
            return
        with self._lock:
            if root not in self.registered_roots:
                self.registered_roots.append(root)
                self.version += 1

    def effective_policy(self) -> AccessPolicy:
        """The policy with the registered directories among its read roots: what the workers
        check the files they open against."""
        with self._lock:
            return AccessPolicy((*self.policy.read_roots, *self.registered_roots), self.policy.write_roots)

    def resolve_paths(self, spec: str, suffixes: tuple[str, ...], from_sql: bool = False) -> list[str]:
        """Expand a file, directory or glob into a sorted list of resolved files inside the roots.

        Paths named inside SQL (``from_sql``) must lie under the roots; a path the user registers
        explicitly may also lie under its own directory when the catalog is ``extendable``.
        """
        return [path for path, _ in self.resolve_files(spec, suffixes, from_sql)]

    def resolve_files(
        self, spec: str, suffixes: tuple[str, ...], from_sql: bool = False, listed: list[str] | None = None
    ) -> list[tuple[str, str]]:
        """:meth:`resolve_paths`, each resolved file with its path as ``spec`` spells it: where
        hive partitions are read from (``catalog.hive``), as DuckDB reads them. The directories
        listed to find them are added to ``listed``.

        Nothing outside the roots is listed or looked at: the fixed part of ``spec`` is checked
        first, and a glob checks each directory before it lists it (a wildcard matched a link
        to a directory outside, or ``s[u]b/../..`` climbed out, and the refusal named the files
        found there)."""
        spec = os.path.expanduser(spec)
        if "://" in spec:
            raise NotSupportedError(f"{spec}: qengine reads files under its data roots, not URLs")
        own = [_root_of(spec)] if self.extendable and not from_sql else []
        with self._lock:
            extra = (*self.registered_roots, *own)
        hint = " (register the data with register_parquet/register_csv or -d, or widen allowed_roots)" if self.extendable else ""

        def check(path: str) -> str:
            try:
                return self.policy.check_read(path, extra)
            except ProgrammingError as e:
                raise ProgrammingError(f"{e}{hint}") from None

        if from_sql or not self.extendable:
            check(str(_split_at_wildcard(spec)[0]))
        seen = listed if listed is not None else []
        if os.path.isdir(spec) and from_sql:  # as DuckDB reads a directory: the files of its reader's kind below it
            found = [p for p in _glob(os.path.join(spec, "**", "*" + suffixes[0]), check, seen) if os.path.isfile(p)]
        elif os.path.isdir(spec):  # a registered directory: its data files, as Spark and Hive list them
            found = []
            for d, dirs, files in os.walk(spec):
                seen.append(d)
                dirs[:] = [n for n in dirs if not _hidden(n)]
                found += [os.path.join(d, f) for f in files if uncompressed(f).lower().endswith(suffixes) and not _hidden(f)]
        elif any(ch in spec for ch in "*?["):
            found = [p for p in _glob(spec, check, seen) if os.path.isfile(p)]
        elif os.path.isfile(spec):
            found = [spec]
        else:
            raise ProgrammingError(f"no such file or directory: {spec}")
        if not found:
            raise ProgrammingError(f"no {'/'.join(suffixes)} files match {spec}")
        # Each name is read, as DuckDB reads it: a link beside the file it links to is read twice.
        resolved = sorted((check(p), p) for p in found)
        if from_sql:
            bad = [p for p in found if not uncompressed(p).lower().endswith(suffixes)]
            if bad:
                raise ProgrammingError(f"{bad[0]} is not a {'/'.join(suffixes)} file")
        for p, _ in resolved:
            if not os.access(p, os.R_OK):
                raise ProgrammingError(f"{p} is not readable")
        return resolved

    def parquet_files(self) -> tuple[str, ...]:
        """Every Parquet file of a registered table: what a fragment's connection may read.

        One set for every task, rather than each split's own files, lets a worker reuse its
        connections (about 6 ms to open) and their Parquet metadata caches across tables and
        queries. It grants a fragment nothing the user could not query anyway.
        """
        with self._lock:
            sources = list(self.tables.values())
        return tuple(sorted({p for s in sources if isinstance(s, ParquetSource) for p in s.paths}))

    def user_tables(self) -> list[Source]:
        """The tables a user made or registered: not the hidden ones (``__…``) a statement's
        table functions and system tables are read through."""
        with self._lock:
            return [s for key, s in self.tables.items() if not key.startswith("__")]

    def add_table(self, source: Source, replace: bool = True) -> Source | View | None:
        """Add ``source`` under its name, in one step with the check that the name is free (or
        ``replace``): two CREATE TABLEs of one name from two threads both succeeded. Returns
        the table or view it replaced, whose data the caller frees."""
        key = source.name.lower()
        _refuse_names_folded_alike(source)
        with self._lock:
            if not replace and (key in self.tables or key in self.views):
                raise ProgrammingError(f"table {source.name!r} already exists")
            replaced = self.views.pop(key, None) or self.tables.get(key)
            self._unreadable.pop(key, None)
            self.tables[key] = source
            self.version += 1
            return replaced

    def add_view(self, view: View, replace: bool) -> None:
        key = view.name.lower()
        with self._lock:
            if key in self.tables or (not replace and key in self.views):
                raise ProgrammingError(f"{view.name!r} already exists")
            self.views[key] = view
            self.version += 1

    def changed(self) -> None:
        """Note a change to a table's contents (rows inserted): its size is in the plans made
        before."""
        with self._lock:
            self.version += 1

    def table(self, name: str) -> Source:
        unreadable = self._unreadable.get(name.lower())
        if unreadable is not None:
            raise unreadable[1]
        try:
            return self.tables[name.lower()]
        except KeyError:
            raise ProgrammingError(f"Table {name!r} does not exist") from None

    def refresh(self) -> None:
        """Read again the tables whose files changed since they were read (a file rewritten in
        place kept its old row groups and columns, and its new rows went unread), as DuckDB
        reads a file afresh at each query. A table whose files no longer read fails the
        statements that use it, with why, until they change again."""
        with self._lock:
            tables = list(self.tables.items())
        for key, source in tables:
            before = source.on_disk()
            if before is None:
                continue
            now = source.disk_state()
            failed = self._unreadable.get(key)
            if now == before or (failed is not None and failed[0] == now):
                continue
            try:
                fresh, error = source.reread(), None
            except Error as e:
                fresh, error = source, OperationalError(f"table {source.name!r} changed on disk and cannot be read again: {e}")
            with self._lock:
                if self.tables.get(key) is not source:
                    continue  # replaced or dropped meanwhile
                self.tables[key] = fresh
                if error is None:
                    self._unreadable.pop(key, None)
                else:
                    self._unreadable[key] = (now, error)
                self.version += 1

    def drop(self, name: str, kind: str, if_exists: bool) -> Source | None:
        """Remove a table or view; returns the dropped table so its data can be released."""
        key = name.lower()
        with self._lock:
            registry = self.tables if kind == "TABLE" else self.views
            if key not in registry:
                if if_exists:
                    return None
                raise ProgrammingError(f"{kind.lower()} {name!r} does not exist")
            dropped = registry.pop(key)
            self._unreadable.pop(key, None)
            self.version += 1
        return dropped if isinstance(dropped, Source) else None


def _root_of(spec: str) -> str:
    """What registering ``spec`` lets SQL read: the file itself, the directory, or for a glob
    the directory before its first wildcard; resolved."""
    path = os.path.expanduser(spec)
    if os.path.isfile(path) or os.path.isdir(path):
        return real(path)
    head = path.split("*")[0].split("?")[0].split("[")[0]
    return real(head if os.path.isdir(head) else os.path.dirname(os.path.abspath(head)) or ".")


def local_catalog(allowed_roots: list[str] | None, output_roots: list[str] | None) -> Catalog:
    """A local cluster's catalog. With no roots it reads under the current directory and the
    files and directories registered explicitly, and writes under the current directory."""
    for name, roots in (("allowed_roots", allowed_roots), ("output_roots", output_roots)):
        if roots is not None and (isinstance(roots, str) or not all(isinstance(r, str) and r for r in roots)):
            raise ProgrammingError(f"{name} must be a list of directory paths, not {roots!r}")
    cwd = [os.getcwd()]
    reads = cwd if allowed_roots is None else allowed_roots
    writes = output_roots if output_roots is not None else (allowed_roots if allowed_roots is not None else cwd)
    return Catalog(AccessPolicy.of(reads, writes), extendable=allowed_roots is None)


def _hidden(name: str) -> bool:
    """Whether a registered directory's listing leaves ``name`` out, as Spark's does: a name
    starting with a dot, or with an underscore unless it is a ``_key=value`` partition."""
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


# What DuckDB decompresses as it reads a CSV or JSON file: ``x.csv.gz`` is a CSV file.
COMPRESSIONS = (".gz", ".zst")


def uncompressed(path: str) -> str:
    """``path`` without the suffix of a compression DuckDB reads through (``x.csv.gz``)."""
    return path[: -len(suffix)] if (suffix := next((s for s in COMPRESSIONS if path.lower().endswith(s)), "")) else path


def _glob(spec: str, check: Callable[[str], object], listed: list[str]) -> list[str]:
    """The paths ``spec`` matches, as DuckDB's glob matches them, each directory passed to
    ``check`` before it is listed, so that nothing outside the roots is listed. ``..`` after a
    wildcard is refused: it climbs out of whatever the wildcard matched, a link included.
    ``**`` descends into directories, not into links to them, as DuckDB's does (a link back to
    a parent made Python's ``glob`` expand without end). Unlike Python's ``glob``, a wildcard
    matches names starting with a dot, and ``**`` enters such directories: DuckDB read them, so
    leaving them out lost their rows. The directories listed are added to ``listed``."""
    fixed, pattern = _split_at_wildcard(spec)
    if ".." in pattern.parts:
        raise ProgrammingError(f"{spec}: '..' after a wildcard is not supported")
    found = [str(fixed)]
    for part in pattern.parts:
        matched: list[str] = []
        for directory in found:
            if not os.path.isdir(directory):
                continue
            check(directory)
            listed.append(directory)
            if part == "**":  # the directory itself and every one below it
                below = [d for d, _, _ in os.walk(directory)]
                listed += below
                matched += below
                continue
            names = [n for n in os.listdir(directory) if fnmatch.fnmatchcase(n, part)]
            matched += [os.path.join(directory, n) for n in names]
        found = matched
    return found


def _split_at_wildcard(spec: str) -> tuple[pathlib.PurePath, pathlib.PurePath]:
    """``spec`` as its fixed directories and the pattern from its first part with a wildcard on
    (the pattern empty when there is none)."""
    parts = pathlib.PurePath(spec).parts
    first = next((i for i, part in enumerate(parts) if any(ch in part for ch in "*?[")), len(parts))
    return pathlib.PurePath(*parts[:first]), pathlib.PurePath(*parts[first:])


def _refuse_names_folded_alike(source: Source) -> None:
    """Refuse a table with two columns that differ only in the case of letters beyond ASCII (``é``
    and ``É``): DuckDB tells them apart, but qengine finds a column by its name's ``lower()``, and
    both read as the first (``SELECT *`` over a registered table gave ``é``'s values twice)."""
    seen: dict[str, str] = {}
    for name in source.schema.names:
        first = seen.setdefault(name.lower(), name)
        if first != name and _ascii_lower(first) != _ascii_lower(name):
            raise NotSupportedError(f"table {source.name!r} has two columns named {first!r} and {name!r}, which differ only in "
                                    "the case of letters beyond ASCII; rename one")


def _ascii_lower(name: str) -> str:
    return name.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
