"""``create_app``: the gateway's FastAPI application.

The route of a request: uvicorn -> ``LimitsMiddleware`` (body size, requests
per key) -> FastAPI routing -> ``CallerCheck`` (the API key's tenant) -> validation
-> a route, which awaits ``AsyncAgentHost`` with the caller's tenant -> the
answer, or an exception turned into problem details by ``gateway.problems``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware

from actors import ActorsError, AgentTemplate
from gateway import (
    routes_checkpoints,
    routes_events,
    routes_health,
    routes_messages,
    routes_sessions,
)
from gateway._context import Gateway
from gateway.keys import ApiKeys
from gateway.limits import Limits, LimitsMiddleware, _bearer
from gateway.problems import (
    PROBLEM_JSON,
    ProblemError,
    UnexpectedErrors,
    handle_http,
    handle_problem,
    handle_validation,
    problem_response,
)
from gateway.schemas import JSON_BODY_RESPONSES, PROBLEM_RESPONSES
from supervisor import AsyncAgentHost, NotDelivered, SessionNotFound, SupervisorError
from supervisor.metrics import HostMetrics

__all__ = ["api_app", "create_app", "openapi_document"]

API_VERSION = "1.0.0"


def api_app(limits: Limits | None = None) -> FastAPI:
    """The routes, middleware and error handlers, without a host (``create_app`` adds it)."""
    app = FastAPI(
        title="sessionvisor gateway",
        version=API_VERSION,
        description="Long-lived agent sessions over HTTP; errors are RFC 9457 problem details.",
        # a JSON body sent without Content-Type is read as JSON, as FastAPI did before 0.132
        # (any other type answers 415: gateway._context.json_body). FastAPI's strict default
        # keeps a browser from posting to an API that takes no credentials without a CORS
        # preflight; every /v1 operation with a body asks for an API key in Authorization,
        # which a browser sends only after a preflight.
        strict_content_type=False,
        # no redirect for a path with a trailing slash (``/v1/sessions/``): Starlette's
        # 307 carried an absolute ``http://`` Location, wrong behind a TLS proxy, and a
        # client that follows it re-sends its key and body. The path is not the API's: its
        # 404 problem answers, as for any unknown path, and says so.
        redirect_slashes=False,
    )
    for router in (
        routes_sessions.router,
        routes_messages.router,
        routes_checkpoints.router,
        routes_events.router,
    ):
        app.include_router(router, responses=PROBLEM_RESPONSES)
    app.include_router(routes_health.router)
    app.openapi = _problems_as_problem_json(app)  # type: ignore[method-assign]
    app.add_exception_handler(SessionNotFound, _handle_not_found)
    for error in (
        ProblemError,
        SupervisorError,
        ActorsError,
        NotDelivered,
        TimeoutError,
        ValueError,
        TypeError,
        LookupError,
    ):
        app.add_exception_handler(error, handle_problem)
    app.add_exception_handler(RequestValidationError, handle_validation)
    app.add_exception_handler(StarletteHTTPException, handle_http)
    app.add_middleware(LimitsMiddleware, limits=limits or Limits())
    app.user_middleware.append(Middleware(UnexpectedErrors))  # inside the limits
    return app


def create_app(
    host: AsyncAgentHost,
    templates: dict[str, AgentTemplate],
    keys: ApiKeys,
    limits: Limits | None = None,
    *,
    metrics_token: str | None = None,
) -> FastAPI:
    """The gateway app serving ``host``'s sessions to holders of ``keys``; ``/metrics``
    to holders of ``metrics_token`` (as a bearer token), or to anyone if ``None``.

    When the host is a cluster node (``AgentHost(node=...)``), requests naming a
    session another node owns are forwarded there (``gateway.routing``), and
    ``keys`` must be the cluster's shared ``PostgresKeyStore``. The host, the key
    store and their shutdown stay the caller's.
    """
    limits = limits or Limits()
    app = api_app(limits)
    metrics = HostMetrics(host.host, CollectorRegistry())  # a registry per app and host
    gateway = Gateway(host, dict(templates), keys, limits, metrics, metrics_token)
    app.state.gateway = gateway
    if host.host.node is not None:  # a cluster node: requests go to each session's owner
        from gateway.routing import ClusterRouting  # noqa: PLC0415 (httpx, only for a cluster)

        # inside LimitsMiddleware (the receiving node applies the limits), outside the routes
        routing = Middleware(
            ClusterRouting, host=host.host, keys=keys, templates=templates, gateway=gateway
        )
        app.user_middleware.append(routing)
    return app


async def _handle_not_found(request: Request, error: Exception) -> JSONResponse:
    """``handle_problem``'s 404, unless the session exists and only its template is not
    served here (a 503 saying so); looked up only on this path, off the routes' way."""
    session_id = request.path_params.get("session_id")
    if session_id is not None:
        gateway: Gateway = request.app.state.gateway
        token = _bearer(request.scope)
        problem = await asyncio.to_thread(gateway.unserved, token, session_id)
        if problem is not None:
            return problem_response(problem, request.scope.get("path"))
    return await handle_problem(request, error)


def _problems_as_problem_json(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi``, with the problem answers' body under the media type they are sent
    with (FastAPI documents every model as ``application/json``)."""
    default = app.openapi
    codes = {str(status) for status in (*PROBLEM_RESPONSES, *JSON_BODY_RESPONSES)}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = default()
        for operations in document["paths"].values():
            for operation in operations.values():
                for status, response in operation.get("responses", {}).items():
                    content = response.get("content", {})
                    if status in codes and "application/json" in content:
                        response["content"] = {PROBLEM_JSON: content["application/json"]}
        return document

    return openapi


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document the app serves (``docs/openapi.json`` keeps a copy)."""
    return api_app().openapi()
