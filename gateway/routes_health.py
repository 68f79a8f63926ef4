"""``/healthz`` (the process answers), ``/readyz`` (its workers all serve), both to GET and
HEAD, and ``/metrics`` (the host's Prometheus metrics, ``supervisor.metrics``)."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway._context import GatewayDep
from gateway.limits import _bearer
from gateway.problems import Problem, ProblemError, unauthorized

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    """Always ``ok`` while the server answers."""
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness")
async def readyz(gateway: GatewayDep) -> dict[str, bool]:
    """Ready unless worker processes are being replaced (or were given up): 503 then."""
    host = gateway.ahost.host
    if host.workers_given_up:  # for good: no replacement comes, asking again will not help
        detail = (
            "worker processes died too often and are no longer replaced (workers given up); "
            "the server's log says why: fix the cause and restart the server"
        )
        raise ProblemError(Problem(503, "not-ready", "Not ready", detail))
    if not host.wait_for_workers(0):
        detail = "worker processes are being replaced"
        raise ProblemError(Problem(503, "not-ready", "Not ready", detail, retry_after=1))
    return {"ready": True}


# The probes answer HEAD as GET (headers and status, no body): uptime monitors and some
# load balancers probe with HEAD, and got 405, so a healthy server was reported down.
# Kept out of the OpenAPI document, which would list each as a second operation.
router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(request: Request, gateway: GatewayDep) -> Response:
    """The host's metrics in Prometheus' text format. No API key: a server started with
    a metrics token (``serve --metrics-token-file``) asks for that token instead."""
    expected = gateway.metrics_token
    if expected is not None:
        given = _bearer(request.scope) or ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            detail = "send the server's metrics token as 'Authorization: Bearer <token>'"
            problem = unauthorized(detail, realm="sessionvisor metrics", invalid=bool(given))
            raise ProblemError(problem)
    body = generate_latest(gateway.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
