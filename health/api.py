"""Health routes. Session health and wake eligibility join here with the health work (ROADMAP.md)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router

from health.doctor import run_doctor

router = Router(tags=["health"])


@router.get("/doctor")
async def doctor(request: HttpRequest) -> dict[str, Any]:
    q = request.GET
    split = lambda key: [v for raw in q.getlist(key) for v in raw.split(",") if v]  # noqa: E731
    return await sync_to_async(run_doctor)(split("only") or None, split("exclude") or None,
                                           q.get("quiet", "").lower() in {"1", "true"})
