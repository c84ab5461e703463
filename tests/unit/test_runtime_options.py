"""Runtime options: exact ids, fast only through one unambiguous speed select, unsupported recorded."""

from __future__ import annotations

from sessions.runtime.options import plan, reported_model, with_current

SPEED = {"id": "speed", "type": "select", "currentValue": "normal",
         "options": [{"value": "normal", "name": "Normal"}, {"value": "fast", "name": "Fast"}]}
MODEL = {"id": "model", "type": "select", "category": "model", "currentValue": "demo-small",
         "options": [{"value": "demo-small", "name": "Small"}, {"value": "demo-large", "name": "Large"}]}


def test_fast_is_applied_through_the_single_speed_select() -> None:
    result = plan([SPEED, MODEL], model="demo-large", model_explicit=True, reasoning_effort="", speed="fast")
    assert ("speed", "speed", "fast") in result.sets
    assert ("model", "model", "demo-large") in result.sets
    assert result.resolutions["speed"] == {"requested": "fast", "status": "applied"}


def test_fast_without_a_speed_option_is_unsupported_not_blocking() -> None:
    result = plan([MODEL], model="demo-small", model_explicit=False, reasoning_effort="", speed="fast")
    assert result.resolutions["speed"]["status"] == "unsupported"
    assert result.sets == []  # the model is already current


def test_two_speed_like_options_are_ambiguous_so_fast_is_not_applied() -> None:
    other = {**SPEED, "id": "turbo", "category": "speed"}
    result = plan([SPEED, other], model="", model_explicit=False, reasoning_effort="", speed="fast")
    assert result.resolutions["speed"]["status"] == "unsupported"
    assert "ambiguous" in result.resolutions["speed"]["reason"]
    assert not [s for s in result.sets if s[0] == "speed"]


def test_an_explicit_model_the_agent_does_not_offer_is_rejected_never_aliased() -> None:
    result = plan([MODEL], model="demo-huge", model_explicit=True, reasoning_effort="", speed="normal")
    assert result.resolutions["model"]["status"] == "rejected"
    assert result.sets == []


def test_a_provider_default_model_not_offered_is_only_unsupported() -> None:
    result = plan([MODEL], model="other-default", model_explicit=False, reasoning_effort="", speed="normal")
    assert result.resolutions["model"]["status"] == "unsupported"


def test_normal_speed_without_options_is_the_provider_default() -> None:
    result = plan(None, model="", model_explicit=False, reasoning_effort="high", speed="normal")
    assert result.resolutions["speed"]["status"] == "applied"
    assert result.resolutions["reasoning_effort"]["status"] == "unsupported"


MODELS_STATE = {"availableModels": [{"modelId": "default", "name": "Default"}, {"modelId": "opus", "name": "Opus"}],
                "currentModelId": "default"}


def test_a_model_offered_only_through_the_models_state_is_set_with_set_model() -> None:
    result = plan(None, model="opus", model_explicit=True, reasoning_effort="", speed="normal", models=MODELS_STATE)
    assert result.set_model == "opus"
    assert result.resolutions["model"] == {"requested": "opus", "status": "applied"}


def test_a_default_model_missing_from_the_models_state_is_reported_unsupported() -> None:
    result = plan(None, model="claude-sonnet-5", model_explicit=False, reasoning_effort="", speed="normal",
                  models=MODELS_STATE)
    assert result.set_model == ""
    assert result.resolutions["model"]["status"] == "unsupported"
    assert "offered: default, opus" in result.resolutions["model"]["reason"]


def test_the_reported_model_is_the_model_selects_current_value_else_the_models_state() -> None:
    assert reported_model([MODEL]) == {"id": "demo-small", "name": "Small", "source": "config_option"}
    assert reported_model(None, MODELS_STATE) == {"id": "default", "name": "Default", "source": "models"}
    assert reported_model([SPEED]) is None


def test_an_applied_value_the_agent_did_not_repeat_becomes_the_options_current_value() -> None:
    """Issue 50, row 4: an agent that accepts a set without answering its options still runs the value set."""
    options = with_current([SPEED, MODEL], "model", "demo-large")
    assert [o["currentValue"] for o in options] == ["normal", "demo-large"]
    assert MODEL["currentValue"] == "demo-small"  # a copy: the agent's answer is not changed under its reader
    assert reported_model(options) == {"id": "demo-large", "name": "Large", "source": "config_option"}
