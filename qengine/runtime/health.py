"""The standard gRPC health service (``grpc.health.v1.Health``) of a coordinator or worker.

Orchestrators (Kubernetes' gRPC probes, ``grpc_health_probe``, Nomad, Consul) ask a process
whether it serves through this service rather than through qengine's own Flight actions. It runs
on a port of its own (Arrow Flight's server cannot host another gRPC service), binds where it is
told (loopback by default, like every qengine server), and answers only calls that carry the
cluster token as ``authorization: Bearer TOKEN``, as every other qengine call must.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from qengine.errors import OperationalError


class _TokenCheck(grpc.ServerInterceptor):
    """Refuses, as UNAUTHENTICATED, any call without the cluster token."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        def refuse(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong cluster token")

        self._refusal = grpc.unary_unary_rpc_method_handler(refuse)

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(given.encode() if isinstance(given, str) else given, self._expected):
            return continuation(details)
        return self._refusal


class HealthEndpoint:
    """A ``grpc.health.v1`` server for one process; ``service`` names it (e.g. ``qengine.Worker``).

    It reports NOT_SERVING until :meth:`set_serving` says otherwise, so a probe that reaches a
    worker before it has joined its coordinator is told it is not ready yet.
    """

    def __init__(self, listen: str, token: str, service: str, tls: tuple[bytes, bytes] | None = None) -> None:
        self.service = service
        self._servicer = health.HealthServicer()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[_TokenCheck(token)])
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, self._server)
        host = listen.rpartition(":")[0]
        if tls is not None:
            port = self._server.add_secure_port(listen, grpc.ssl_server_credentials([(tls[1], tls[0])]))
        else:
            port = self._server.add_insecure_port(listen)
        if port == 0:
            raise OperationalError(f"cannot serve the health service on {listen}: the address is in use or not local")
        self.address = f"{host}:{port}"
        self.set_serving(False)
        self._server.start()

    def set_serving(self, serving: bool) -> None:
        """Report this process (and its named service) as serving or not."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", self.service):
            self._servicer.set(name, status)

    def stop(self) -> None:
        """Report NOT_SERVING to watchers, then stop answering."""
        self._servicer.enter_graceful_shutdown()
        self._server.stop(grace=1).wait()
