"""The attention app's closed sets."""

from __future__ import annotations

from enum import StrEnum

from compozy_base.config.notifications import WebhookEvent

__all__ = ["AttentionKind", "DeliveryStatus", "WebhookEvent"]


class AttentionKind(StrEnum):
    """What an attention item asks of a person. `elicitation` is an agent's open question (ACP form mode)."""

    PERMISSION = "permission"
    ELICITATION = "elicitation"
    AUTH = "auth"
    FAILED = "failed"
    TASK = "task"
    BUDGET = "budget"
    QUIET = "quiet"  # a running turn without agent output past `quiet_attention_after` (sessions/core/display.py)


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # waiting for its next attempt (or in one, while claimed)
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # given up: max_attempts spent, a 4xx answer, or its webhook removed from config.toml
