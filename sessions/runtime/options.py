"""Runtime options fixed at create (model, reasoning effort, speed), applied before the first prompt
through the agent's advertised ACP config options (docs/reference/sessions.md §3).

Exact value ids only: no aliasing and no silent fallback. `fast` is applied only through one
unambiguous speed select offering it; anything unsupported is recorded, never blocking.

Models come either as a config option (category `model`, current ACP) or, from older adapters, as the
`models` state of session/new (`{availableModels: [{modelId, name}], currentModelId}`, set through
`session/set_model`). Either way the agent says which model it runs; `reported_model` reads that, so
status shows the model in use rather than the one we asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sessions.core.acp_shapes import ConfigOption
from sessions.core.record import ReportedModel, Resolution

MODEL_KEYS = ("model",)
EFFORT_KEYS = ("reasoning_effort", "effort", "thought_level", "reasoning")
SPEED_KEYS = ("speed",)


@dataclass
class OptionPlan:
    """Config options to set, in order, plus what to record about each request."""

    sets: list[tuple[str, str, str]] = field(default_factory=list)  # (what, config id, value)
    resolutions: dict[str, Resolution] = field(default_factory=dict)
    set_model: str = ""  # a model id to set through `session/set_model` (only the `models` state offers it)


def _selects(config_options: list[ConfigOption]) -> list[ConfigOption]:
    return [o for o in config_options if isinstance(o, dict) and o.get("type", "select") == "select" and o.get("id")]


def _values(option: ConfigOption) -> list[str]:
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


def _matching(selects: list[ConfigOption], keys: tuple[str, ...]) -> list[ConfigOption]:
    return [o for o in selects if str(o.get("id", "")).lower() in keys or str(o.get("category") or "").lower() in keys]


def _model_state(models: Any) -> tuple[list[dict[str, str]], str]:
    """(offered [{id, name}], current id) from a session/new `models` state; empty when absent."""
    if not isinstance(models, dict):
        return [], ""
    offered = [{"id": str(m["modelId"]), "name": str(m.get("name") or m["modelId"])}
               for m in models.get("availableModels") or [] if isinstance(m, dict) and m.get("modelId")]
    return offered, str(models.get("currentModelId") or "")


def plan(config_options: list[ConfigOption] | None, *, model: str, model_explicit: bool,
         reasoning_effort: str, speed: str, models: Any = None) -> OptionPlan:
    result = OptionPlan()
    selects = _selects(config_options or [])
    offered_models, current_model = _model_state(models)

    def request(what: str, value: str, keys: tuple[str, ...], explicit: bool) -> None:
        if not value:
            return
        candidates = _matching(selects, keys)
        if what == "model" and not candidates and offered_models:
            ids = [m["id"] for m in offered_models]
            if value not in ids:
                result.resolutions[what] = {"requested": value, "status": "rejected" if explicit else "unsupported",
                                            "reason": f"value not offered (offered: {', '.join(ids)})"}
            elif value == current_model:
                result.resolutions[what] = {"requested": value, "status": "applied", "reason": "already current"}
            else:
                result.set_model = value
                result.resolutions[what] = {"requested": value, "status": "applied"}
            return
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


def with_current(config_options: list[ConfigOption], config_id: str, value: str) -> list[ConfigOption]:
    """The options after the agent accepted `value` for `config_id` without repeating its state (an answer without
    `configOptions`): the same options, that one's current value changed."""
    return [{**o, "currentValue": value} if isinstance(o, dict) and o.get("id") == config_id else o
            for o in config_options]


def reported_model(config_options: list[ConfigOption] | None, models: Any = None) -> ReportedModel | None:
    """The model the agent says it runs, `{id, name, source}`: the current value of its one model select,
    else the `models` state's current id; None when it reports neither."""
    candidates = _matching(_selects(config_options or []), MODEL_KEYS)
    if len(candidates) == 1 and candidates[0].get("currentValue") not in (None, ""):
        option = candidates[0]
        current = str(option["currentValue"])
        names = {str(i.get("value")): str(i.get("name") or i.get("value"))
                 for item in option.get("options") or [] if isinstance(item, dict)
                 for i in [item, *(g for g in item.get("options") or [] if isinstance(g, dict))] if "value" in i}
        return {"id": current, "name": names.get(current, current), "source": "config_option"}
    offered, current = _model_state(models)
    if current:
        names = {m["id"]: m["name"] for m in offered}
        return {"id": current, "name": names.get(current, current), "source": "models"}
    return None
