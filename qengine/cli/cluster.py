"""``qengine coordinator`` and ``qengine worker``: a cluster over many hosts, and its flags."""

from __future__ import annotations

import argparse
import faulthandler
import ipaddress
import logging
import os
import signal
import socket
import threading
from typing import Any

from qengine.api.options import parse_size
from qengine.api.session_leases import DEFAULT_SESSION_TIMEOUT
from qengine.catalog.access import AccessPolicy
from qengine.errors import ProgrammingError
from qengine.runtime.fair_queue import POLICIES
from qengine.runtime.membership import DEFAULT_HEARTBEAT_TIMEOUT


def read_token(path: str | None) -> str:
    """The cluster token from ``--token-file`` (a file, so it never shows in ``ps``)."""
    if not path:
        raise ProgrammingError("give the cluster token with --token-file FILE")
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as e:
        raise ProgrammingError(f"cannot read the token file {path}: {e.strerror}") from e
    if not token:
        raise ProgrammingError(f"the token file {path} is empty")
    return token


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ProgrammingError(f"cannot read {text!r} as HOST:PORT (e.g. 127.0.0.1:7777)")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ProgrammingError(f"cannot read {text!r} as HOST:PORT: write an IPv6 address in brackets, as in [::1]:7777")
    if _unspecified(host):
        raise ProgrammingError(f"listen on a concrete address, not {host}: it is also the address others use to reach this process")
    return host, int(port)


def _unspecified(host: str) -> bool:
    """Whether ``host`` is the any-address in some spelling (``0.0.0.0``, ``0.0.0.00``, ``0``,
    ``[::0]``), which binds every interface: the C resolver reads IPv4 leniently."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        pass
    try:
        return socket.inet_aton(host) == bytes(4)
    except OSError:
        return False  # a host name


def read_pem(path: str) -> bytes:
    """A PEM file's bytes, with a user error (not a traceback) when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ProgrammingError(f"cannot read {path}: {e.strerror}") from e


def tls_material(args: argparse.Namespace) -> tuple[tuple[bytes, bytes] | None, bytes | None]:
    """(certificate, key) to serve with and the root certificates to verify peers with."""
    if not args.tls_cert and not args.tls_key and not args.tls_ca:
        return None, None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ProgrammingError("--tls-cert and --tls-key go together")
    pair = (read_pem(args.tls_cert), read_pem(args.tls_key)) if args.tls_cert else None
    root = read_pem(args.tls_ca or args.tls_cert)
    return pair, root


def add_security_arguments(parser: argparse.ArgumentParser, token_required: bool = True) -> None:
    """The token, TLS and health flags, shared so ``coordinator``, ``worker`` and ``serve`` accept the same ones."""
    parser.add_argument("--token-file", required=token_required,
                        help="file holding the cluster token" + ("" if token_required else " (default: a new one in the cache directory)"))
    parser.add_argument("--tls-cert", help="PEM certificate to serve TLS with")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-ca", help="PEM root certificates to verify peers with (default: --tls-cert)")
    parser.add_argument("--health", metavar="HOST:PORT",
                        help="also serve the standard grpc.health.v1 service here, for orchestrators' probes (token required)")


def stop_on_sigterm(stop: Any) -> None:
    """SIGTERM and SIGINT stop the server cleanly (from a thread: a handler must not block)."""
    def handler(signum: int, frame: Any) -> None:
        threading.Thread(target=stop, daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def health_endpoint(args: argparse.Namespace, token: str, pair: tuple[bytes, bytes] | None, role: str) -> Any:
    """The grpc.health.v1 endpoint ``--health`` asks for (service ``qengine.Coordinator`` or
    ``qengine.Worker`` for ``role``), or None."""
    if not args.health:
        return None
    from qengine.runtime.health import HealthEndpoint

    host, port = parse_listen(args.health)
    endpoint = HealthEndpoint(f"{host}:{port}", token, f"qengine.{role.capitalize()}", pair)
    print(f"qengine {role} health service on {endpoint.address}", flush=True)
    return endpoint


def access_policy(data_roots: list[str] | None, output_roots: list[str] | None) -> AccessPolicy:
    """The coordinator's roots. Reading is confined by default: with no ``--data-root`` it
    refuses to start rather than expose every file of its hosts to each token holder."""
    if not data_roots:
        raise ProgrammingError(
            "give the directories sessions may read with --data-root DIR (repeatable); "
            "--data-root / allows every file the worker processes can read"
        )
    for root in [*data_roots, *(output_roots or [])]:
        if not os.path.isdir(root):
            raise ProgrammingError(f"{root} is not a directory")
    policy = AccessPolicy.of(data_roots, output_roots or [])
    if "/" in policy.read_roots or "/" in policy.write_roots:
        logging.getLogger("qengine.runtime.coordinator").warning(
            "a root is /: every token holder may read (or write) any file the cluster's processes can"
        )
    return policy


def cmd_coordinator(args: argparse.Namespace) -> int:
    from qengine.api.server import CoordinatorServer
    from qengine.cli.common import directory_tables
    from qengine.runtime.shares import Shares

    token = read_token(args.token_file)
    host, port = parse_listen(args.listen)
    pair, root = tls_material(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s coordinator %(levelname)s %(message)s")
    faulthandler.enable()  # a crash in native code leaves the Python stacks in the log
    policy = access_policy(args.data_root, args.output_root)
    shares = Shares(args.scheduling, dict(args.user_weight or []), nass=args.nass, samp=args.samp)
    tables = [table for directory in args.data or [] for table in directory_tables(directory)]
    server = CoordinatorServer(
        host, port, token, args.heartbeat_timeout, pair, root, policy, args.max_queries_per_user, shares, served_tables=tables,
        session_timeout=args.session_timeout,
    )
    stop_on_sigterm(server.shutdown)  # before saying so: a SIGTERM sent once it listens must stop it
    print(f"qengine coordinator listening on {server.address}", flush=True)
    health = health_endpoint(args, token, pair, "coordinator")
    ui = None
    try:
        ui = web_ui(args, server, token)
        if health is not None:
            health.set_serving(True)
        server.serve()
    finally:
        if ui is not None:
            ui.stop()
        server.release()
        if health is not None:
            health.stop()
    return 0


def web_ui(args: argparse.Namespace, server: Any, token: str) -> Any:
    """The coordinator's web UI that ``--ui`` asks for (HTTPS with --tls-cert), or None."""
    if not args.ui:
        return None
    from qengine.ui.server import UiServer

    host, port = parse_listen(args.ui)
    tls_files = (args.tls_cert, args.tls_key) if args.tls_cert else None
    ui = UiServer(server.registry, token, host, port, server.admission.waiting, tls_files)
    print(f"qengine web UI on {ui.url} (log in with the cluster token)", flush=True)
    return ui


def cmd_worker(args: argparse.Namespace) -> int:
    from qengine.cli.common import cache_dir
    from qengine.runtime.worker import serve_joined

    token = read_token(args.token_file)
    host, port = parse_listen(args.listen)
    pair, root = tls_material(args)
    budget = parse_size(args.memory_budget, "--memory-budget")
    log_file = args.log or os.path.join(cache_dir(), "logs", f"worker-{os.getpid()}.log")
    os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
    health = health_endpoint(args, token, pair, "worker")

    def started(stop: Any) -> None:  # registered with the coordinator: ready for tasks
        stop_on_sigterm(stop)
        if health is not None:
            health.set_serving(True)

    try:
        serve_joined(args.join, host, port, token, log_file, budget, pair, root, on_start=started)
    finally:
        if health is not None:
            health.stop()
    return 0


def cmd_queries(args: argparse.Namespace) -> int:
    """Print the statements a standalone coordinator runs and queues, every user's."""
    import pyarrow as pa

    import qengine
    from qengine.cli.output import write_result

    root = read_pem(args.tls_ca) if args.tls_ca else None
    with qengine.connect(f"qengine://{args.cluster}", token=read_token(args.token_file), tls_root_certs=root) as con:
        rows = con.queries()
    columns = ["query", "user", "weight", "state", "waits_for", "position", "needs_bytes"]
    write_result(pa.table({c: [row.get(c) for row in rows] for c in columns}), args.format, None)
    return 0


def _positive_int(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A timeout option's value: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


def add_session_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--session-timeout", type=positive_seconds, default=DEFAULT_SESSION_TIMEOUT, metavar="SECONDS",
                        help="close a client's session, and drop its tables, once the client has not been heard from "
                             f"for this long (a connected client says it is there every quarter of it; default {DEFAULT_SESSION_TIMEOUT:g})")


def _user_weight(text: str) -> tuple[str, float]:
    user, _, weight = text.partition("=")
    try:
        value = float(weight)
    except ValueError:
        value = 0.0
    if not user or not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected USER=WEIGHT with a positive weight, such as alice=3, not {text!r}")
    return user, value


def add_parsers(sub: Any) -> None:
    co = sub.add_parser("coordinator", help="run a standalone coordinator that workers join")
    co.add_argument("--listen", default="127.0.0.1:7777", help="HOST:PORT to serve on (default 127.0.0.1:7777)")
    co.add_argument("--heartbeat-timeout", type=positive_seconds, default=DEFAULT_HEARTBEAT_TIMEOUT,
                    help=f"seconds without a heartbeat before a worker is marked dead (default {DEFAULT_HEARTBEAT_TIMEOUT:g})")
    co.add_argument("--data-root", action="append", metavar="DIR",
                    help="a directory sessions may read tables from (repeatable; required: / allows every file)")
    co.add_argument("-d", "--data", action="append", metavar="DIR",
                    help="serve every Parquet/CSV file or directory under DIR (inside a --data-root) as a table to "
                         "Flight SQL clients (repeatable)")
    co.add_argument("--output-root", action="append", metavar="DIR",
                    help="a directory COPY may write below (repeatable; default: none, COPY is refused)")
    co.add_argument("--max-queries-per-user", type=_positive_int, default=None, metavar="N",
                    help="statements of one user (connect(user=...)) run at once; others wait their turn (default: no limit)")
    co.add_argument("--scheduling", choices=POLICIES, default="fair",
                    help="how queries share the workers' slots: fair (by user weight) or fifo (first come first served); default fair")
    co.add_argument("--user-weight", type=_user_weight, action="append", metavar="USER=WEIGHT",
                    help="a user's share of the cluster against others' (repeatable; default 1 each)")
    co.add_argument("--nass", action=argparse.BooleanOptionalAction, default=True,
                    help="ShuffleWatcher's NASS: while the network is saturated, fetch rather than push and hold "
                         "reducers back (up to 2 s) for other queries' map work (default on)")
    co.add_argument("--samp", action=argparse.BooleanOptionalAction, default=True,
                    help="ShuffleWatcher's SAMP: keep a shuffle-heavy query that shares the cluster to as many hosts "
                         "as its share, its reducers with its map output (default on)")
    co.add_argument("--ui", nargs="?", const="127.0.0.1:0", metavar="HOST:PORT",
                    help="serve the web UI (queries, their stage DAGs and timelines, workers) here; it takes the cluster "
                         "token (default 127.0.0.1, a free port; HTTPS with --tls-cert)")
    add_session_timeout(co)
    add_security_arguments(co)
    co.set_defaults(func=cmd_coordinator)

    qs = sub.add_parser("queries", help="list the statements a standalone coordinator runs and queues, with their places in the queues")
    qs.add_argument("--cluster", required=True, metavar="HOST:PORT", help="the standalone coordinator")
    qs.add_argument("--token-file", help="file holding the cluster token")
    qs.add_argument("--tls-ca", help="PEM root certificates to verify the coordinator with (turns TLS on)")
    qs.add_argument("--format", choices=["table", "csv", "json"], default="table")
    qs.set_defaults(func=cmd_queries)

    wk = sub.add_parser("worker", help="run a worker and join a coordinator")
    wk.add_argument("--join", required=True, help="HOST:PORT of the coordinator")
    wk.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to serve on (default 127.0.0.1, any port)")
    wk.add_argument("--memory-budget", default=None, help="shuffle memory budget, e.g. 4GB; beyond it blocks spill to disk")
    wk.add_argument("--log", default=None, help="log file (default: the cache directory's logs/)")
    add_security_arguments(wk)
    wk.set_defaults(func=cmd_worker)
