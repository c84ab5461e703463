"""One `compozy doctor` row: the shape every check returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def item(id_: str, category: str, severity: str, title: str, message: str,
         suggested_command: str | None = None, evidence: Mapping[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": id_, "code": id_, "category": category, "severity": severity, "title": title,
                           "message": message, "data_freshness": "live"}
    if suggested_command:
        out["suggested_command"] = suggested_command
    if evidence:
        out["evidence"] = evidence
    return out
