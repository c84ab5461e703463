"""Health routes. Session health and wake eligibility join here with the health work (ROADMAP.md)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Query, Router

from health.doctor import run_doctor
from sessions.schemas import DoctorOut, DoctorQuery, responses

router = Router(tags=["health"])


@router.get("/doctor", response=responses({200: DoctorOut}), exclude_unset=True)
async def doctor(request: HttpRequest, filters: Query[DoctorQuery]) -> dict[str, Any]:
    def split(values: list[str] | None) -> list[str] | None:
        return [v for raw in values or [] for v in raw.split(",") if v] or None

    return await sync_to_async(run_doctor)(split(filters.only), split(filters.exclude), filters.quiet)
