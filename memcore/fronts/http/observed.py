"""``GET /metrics`` and the middleware that counts every HTTP request for it (core/metrics.py).

A request is counted under its route's template (``/api/memories/{memory_id}``, never the id:
one series a route, however many memories), its method and its status, refusals by the Guard
(401, 413, 421) included; a path no route takes is counted as ``unmatched``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memcore.core.metrics import CONTENT_TYPE, Metrics
from memcore.service import MemoryService


class Observed:
    """ASGI middleware, outermost: counts and times each HTTP request in ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.by_endpoint: dict[object, list[Route]] = {}
        for r in routes:
            if isinstance(r, Route):
                self.by_endpoint.setdefault(r.endpoint, []).append(r)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]  # an answer never started: the server's fault

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route, method = self._route(scope), scope["method"]
            self.metrics.requests.labels(route, method, str(status[0])).inc()
            self.metrics.request_seconds.labels(route, method).observe(
                time.perf_counter() - started
            )

    def _route(self, scope: Scope) -> str:
        """The template of the route that took the request (matched again when the Guard
        answered before routing)."""
        taken = self.by_endpoint.get(scope.get("endpoint"), [])
        if len(taken) == 1:
            return taken[0].path
        for route in taken or self.routes:  # an endpoint under two paths (Mem0's v1 and v2)
            match, _ = route.matches(scope)
            if match is Match.FULL and isinstance(route, Route):
                return route.path
        return "unmatched"


def metrics_route(service: MemoryService) -> Route:
    async def metrics(request: Request) -> Response:
        """The process's metrics in Prometheus' text format (the same token as /api/status)."""
        return Response(await service.metrics_text(), media_type=CONTENT_TYPE)

    return Route("/metrics", metrics, methods=["GET"])
