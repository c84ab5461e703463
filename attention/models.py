"""The attention app's catalog rows: acknowledgements of attention items, and the webhook outbox."""

from __future__ import annotations

from django.db import models

from attention.enums import DeliveryStatus, WebhookEvent


class AttentionAck(models.Model):
    """A person said "seen" (`POST /api/attention/{id}/ack`). Item ids are derived from what the item is about
    and when it began, so a new failure of the same session is a new item that no old acknowledgement hides."""

    item_id = models.CharField(primary_key=True, max_length=40)
    acked_at = models.DateTimeField()


class WebhookDelivery(models.Model):
    """One event for one webhook, written when the event is recorded and kept until delivered or given up.

    The body is stored as sent (the idempotency key `id` inside it), without the secret: it is signed at each
    attempt with the webhook's current secret. A node claims a due row with a compare-and-set on `claimed_by`
    and `claimed_until`, so in a cluster each attempt is made by one node; a claim left by a killed daemon lapses
    at `claimed_until`, and any node (or the restarted one) takes the row again: at least once, none lost."""

    id = models.CharField(primary_key=True, max_length=80)  # <event id>.<webhook key>
    event_id = models.CharField(max_length=40, db_index=True)
    event = models.CharField(max_length=40, choices=[(e.value, e.value) for e in WebhookEvent])
    webhook = models.CharField(max_length=40)  # WebhookConfig.key: a digest of its URL, never the secret
    # Where it goes, as doctor shows it: scheme, host and port only (a chat tool's webhook URL is itself a secret).
    target = models.CharField(max_length=300)
    body = models.TextField()
    status = models.CharField(max_length=20, choices=[(s.value, s.value) for s in DeliveryStatus],
                              default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_by = models.CharField(max_length=400, blank=True, default="")
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="attention_due")]
