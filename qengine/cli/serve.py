"""``qengine serve``: a coordinator and its workers on this machine behind one endpoint, for
clients that connect over the network: Arrow Flight SQL (ADBC, JDBC, pandas, SQLAlchemy) and
qengine's own ``qengine://`` connections.

It is ``qengine coordinator`` with ``--workers`` worker processes that this command starts,
joins to it over loopback, and stops when it stops, and with the tables under ``-d DIR`` served
to Flight SQL clients.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import subprocess
import sys
import time
from typing import Any

from qengine.api.options import DEFAULT_WORKERS
from qengine.cli.cluster import (
    access_policy,
    add_security_arguments,
    add_session_timeout,
    health_endpoint,
    parse_listen,
    read_token,
    stop_on_sigterm,
    tls_material,
)
from qengine.cli.common import cache_dir, directory_tables
from qengine.cli.processes import stop_processes
from qengine.errors import OperationalError, ProgrammingError
from qengine.runtime.membership import DEFAULT_HEARTBEAT_TIMEOUT

JOIN_SECONDS = 60.0  # how long the workers have to join before serve gives up


def _token_file(path: str | None) -> str:
    """The token file given, or a new token in the cache directory, readable by its owner only."""
    if path:
        return path
    directory = os.path.join(cache_dir(), "serve")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(secrets.token_hex(16))
    return path


def _start_workers(args: argparse.Namespace, address: str, token_file: str) -> list[subprocess.Popen]:
    """Start the workers, each in a session of its own (the terminal's Ctrl-C reaches this
    command, which stops them), logging to the cache directory."""
    logs = os.path.join(cache_dir(), "logs")
    os.makedirs(logs, exist_ok=True)
    tls = [flag for name in ("tls_cert", "tls_key", "tls_ca") if getattr(args, name)
           for flag in (f"--{name.replace('_', '-')}", getattr(args, name))]
    procs = []
    for i in range(args.workers):
        log = os.path.join(logs, f"serve-worker-{i}.log")
        command = [sys.executable, "-m", "qengine.cli", "worker", "--join", address, "--token-file", token_file, "--log", log, *tls]
        if args.memory_budget:
            command += ["--memory-budget", args.memory_budget]
        with open(log + ".err", "w") as err:
            procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True))
    return procs


def cmd_serve(args: argparse.Namespace) -> int:
    from qengine.api.server import CoordinatorServer

    if args.workers < 1:
        raise ProgrammingError(f"--workers must be at least 1, not {args.workers}")
    token_file = _token_file(args.token_file)
    token = read_token(token_file)
    host, port = parse_listen(args.listen)
    pair, root = tls_material(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s serve %(levelname)s %(message)s")
    data = [os.path.abspath(d) for d in (args.data or [os.getcwd()])]
    tables = [table for directory in data for table in directory_tables(directory)]
    policy = access_policy(data, args.output_root)
    server = CoordinatorServer(
        host, port, token, DEFAULT_HEARTBEAT_TIMEOUT, pair, root, policy, served_tables=tables, session_timeout=args.session_timeout,
        open_now=False,  # its port is open: sessions wait for the workers started below
    )
    procs: list[subprocess.Popen] = []
    health = None
    try:
        stop_on_sigterm(server.shutdown)
        procs = _start_workers(args, server.address, token_file)
        _await_workers(server, procs, args.workers)
        server.opened.set()
        health = health_endpoint(args, token, pair, "coordinator")
        if health is not None:
            health.set_serving(True)
        scheme = "grpc+tls" if pair else "grpc"
        print(f"qengine serve: Flight SQL and qengine:// on {scheme}://{server.address} with {args.workers} workers, "
              f"{len(tables)} tables; token in {token_file}", flush=True)
        server.serve()
    finally:
        server.release()
        stop_processes(procs)
        if health is not None:
            health.stop()
    return 0


def _await_workers(server: Any, procs: list[subprocess.Popen], workers: int) -> None:
    deadline = time.monotonic() + JOIN_SECONDS
    while len(server.registry.addresses) < workers:
        failed = [p for p in procs if p.poll() is not None]
        if failed:
            raise OperationalError(f"a worker exited with code {failed[0].returncode} before joining (see the cache directory's logs/)")
        if time.monotonic() > deadline:
            raise OperationalError(f"the workers did not join within {JOIN_SECONDS:g} s (see the cache directory's logs/)")
        time.sleep(0.05)


def add_parser(sub: Any) -> None:
    sv = sub.add_parser("serve", help="serve Flight SQL (ADBC, JDBC) and qengine:// from a coordinator and local workers")
    sv.add_argument("-d", "--data", action="append", metavar="DIR",
                    help="serve every Parquet/CSV file or directory under DIR as a table, and let SQL read below it "
                         "(repeatable; default: the current directory)")
    sv.add_argument("--listen", default="127.0.0.1:31337", help="HOST:PORT to serve on (default 127.0.0.1:31337)")
    sv.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help=f"worker processes to start (default {DEFAULT_WORKERS})")
    sv.add_argument("--output-root", action="append", metavar="DIR", help="a directory COPY may write below (repeatable; default none)")
    sv.add_argument("--memory-budget", default=None, help="each worker's shuffle memory budget, e.g. 4GB")
    add_session_timeout(sv)
    add_security_arguments(sv, token_required=False)
    sv.set_defaults(func=cmd_serve)
