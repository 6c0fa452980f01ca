"""The standard gRPC health service (grpc.health.v1) of coordinators and workers."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from qengine.runtime.health import HealthEndpoint
from tests.conftest import free_port, wait_until

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def check(address: str, token: str | None, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        metadata = [("authorization", f"Bearer {token}")] if token is not None else None
        return stub.Check(health_pb2.HealthCheckRequest(service=service), metadata=metadata, timeout=5).status


def test_health_reports_readiness_and_refuses_calls_without_the_token() -> None:
    endpoint = HealthEndpoint("127.0.0.1:0", "sekrit", "qengine.Worker")
    try:
        assert endpoint.address.startswith("127.0.0.1:")
        assert check(endpoint.address, "sekrit") == NOT_SERVING  # not ready until told
        endpoint.set_serving(True)
        assert check(endpoint.address, "sekrit") == SERVING
        assert check(endpoint.address, "sekrit", "qengine.Worker") == SERVING
        for token in (None, "wrong", "sekrit2"):
            with pytest.raises(grpc.RpcError) as e:
                check(endpoint.address, token)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            check(endpoint.address, "sekrit", "no.such.Service")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        endpoint.set_serving(False)
        assert check(endpoint.address, "sekrit") == NOT_SERVING
    finally:
        endpoint.stop()
    with pytest.raises(grpc.RpcError) as e:
        check(endpoint.address, "sekrit")
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_coordinator_and_worker_serve_health_when_asked(tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-" + os.urandom(6).hex())
    token = token_file.read_text()
    address, coordinator_health, worker_health = (f"127.0.0.1:{free_port()}" for _ in range(3))
    base = [sys.executable, "-m", "qengine.cli"]
    procs: list[subprocess.Popen] = []
    try:
        coordinator = subprocess.Popen(
            [*base, "coordinator", "--listen", address, "--health", coordinator_health, "--token-file", str(token_file),
             "--data-root", str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        procs.append(coordinator)
        assert "listening on" in coordinator.stdout.readline()
        assert f"health service on {coordinator_health}" in coordinator.stdout.readline()
        assert check(coordinator_health, token, "qengine.Coordinator") == SERVING
        worker = subprocess.Popen(
            [*base, "worker", "--join", address, "--health", worker_health, "--token-file", str(token_file),
             "--log", str(tmp_path / "worker.log")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        procs.append(worker)
        assert f"health service on {worker_health}" in worker.stdout.readline()
        assert "serving on" in worker.stdout.readline()
        wait_until(lambda: check(worker_health, token, "qengine.Worker") == SERVING, 10, "the worker to report SERVING once joined")
        with pytest.raises(grpc.RpcError):
            check(worker_health, None)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
