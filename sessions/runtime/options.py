"""Runtime options fixed at create (model, reasoning effort, speed), applied before the first prompt
through the agent's advertised ACP config options (sessions reference §3).

Exact value ids only: no aliasing and no silent fallback. `fast` is applied only through one
unambiguous speed select offering it; anything unsupported is recorded, never blocking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MODEL_KEYS = ("model",)
EFFORT_KEYS = ("reasoning_effort", "effort", "thought_level", "reasoning")
SPEED_KEYS = ("speed",)


@dataclass
class OptionPlan:
    """Config options to set, in order, plus what to record about each request."""

    sets: list[tuple[str, str, str]] = field(default_factory=list)  # (what, config id, value)
    resolutions: dict[str, dict[str, Any]] = field(default_factory=dict)


def _selects(config_options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in config_options if isinstance(o, dict) and o.get("type", "select") == "select" and o.get("id")]


def _values(option: dict[str, Any]) -> list[str]:
    values: list[str] = []
    for item in option.get("options") or []:
        if not isinstance(item, dict):
            continue
        if "value" in item:
            values.append(str(item["value"]))
        for grouped in item.get("options") or []:  # grouped selects
            if isinstance(grouped, dict) and "value" in grouped:
                values.append(str(grouped["value"]))
    return values


def _matching(selects: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [o for o in selects if str(o.get("id", "")).lower() in keys or str(o.get("category") or "").lower() in keys]


def plan(config_options: list[dict[str, Any]] | None, *, model: str, model_explicit: bool,
         reasoning_effort: str, speed: str) -> OptionPlan:
    result = OptionPlan()
    selects = _selects(config_options or [])

    def request(what: str, value: str, keys: tuple[str, ...], explicit: bool) -> None:
        if not value:
            return
        candidates = _matching(selects, keys)
        if len(candidates) != 1:
            reason = "no config option advertised" if not candidates else "ambiguous: several options match"
            result.resolutions[what] = {"requested": value, "status": "unsupported", "reason": reason}
            return
        option = candidates[0]
        if value not in _values(option):
            status = "rejected" if explicit else "unsupported"
            result.resolutions[what] = {"requested": value, "status": status,
                                        "reason": f"value not offered (offered: {', '.join(_values(option))})"}
            return
        if str(option.get("currentValue")) == value:
            result.resolutions[what] = {"requested": value, "status": "applied", "reason": "already current"}
            return
        result.sets.append((what, str(option["id"]), value))
        result.resolutions[what] = {"requested": value, "status": "applied"}

    request("model", model, MODEL_KEYS, model_explicit)
    request("reasoning_effort", reasoning_effort, EFFORT_KEYS, True)
    if speed == "fast":
        request("speed", "fast", SPEED_KEYS, True)
    else:
        options = _matching(selects, SPEED_KEYS)
        if len(options) == 1 and "normal" in _values(options[0]):
            request("speed", "normal", SPEED_KEYS, True)
        else:
            result.resolutions["speed"] = {"requested": "normal", "status": "applied", "reason": "provider default"}
    return result
