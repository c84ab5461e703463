"""The accounts app's catalog rows: people, their API tokens (hashed), and the audit log."""

from __future__ import annotations

from django.db import models

from accounts.scopes import Role


class User(models.Model):
    """A person who uses the daemon. `owner` is implicit (the token made at first start) and has no row."""

    name = models.CharField(primary_key=True, max_length=64)
    role = models.CharField(max_length=16, choices=[(r.value, r.value) for r in Role], default=Role.OPERATOR)
    created_at = models.DateTimeField()


class ApiToken(models.Model):
    """A bearer token: `<id>.<secret>`, of which only a salted SHA-256 of the secret is kept (the secret is shown
    once, at creation). `workspaces` empty means every workspace; a revoked or expired token is refused at once."""

    id = models.CharField(primary_key=True, max_length=40)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="tokens")
    salt = models.CharField(max_length=64)
    digest = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    workspaces = models.JSONField(default=list)  # workspace ids
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)


class AuditEntry(models.Model):
    """One write, by whom: every API write that changed something, an action link's answer, the daemon's own."""

    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=120)  # Actor.label
    actor_kind = models.CharField(max_length=20)
    user = models.CharField(max_length=64, blank=True, default="", db_index=True)
    token_id = models.CharField(max_length=40, blank=True, default="")
    action = models.CharField(max_length=60)
    method = models.CharField(max_length=10, blank=True, default="")
    path = models.CharField(max_length=500, blank=True, default="")
    session_id = models.CharField(max_length=64, blank=True, default="")
    status = models.PositiveSmallIntegerField(default=0)
    detail = models.JSONField(default=dict)


class LinkKey(models.Model):
    """The key that signs action links: made once, in the catalog, so a link made on one node of a cluster opens
    on another."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    secret = models.CharField(max_length=128)
    created_at = models.DateTimeField()


class ActionLink(models.Model):
    """One signed, single-use, expiring link answering one request (a permission, or a question) of one session: its
    two URLs (approve and deny; answer and decline) share the row, so once either is used both are spent. Made by a
    token (the owner's for the links a webhook carries); its use is logged as `webhook-link` with that token."""

    id = models.CharField(primary_key=True, max_length=40)
    kind = models.CharField(max_length=20)  # permission or elicitation (accounts/links.py LinkKind)
    session_id = models.CharField(max_length=64)
    workspace_id = models.CharField(max_length=64)
    request_id = models.CharField(max_length=200)
    title = models.CharField(max_length=300, blank=True, default="")
    user = models.CharField(max_length=64)
    token_id = models.CharField(max_length=40)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_action = models.CharField(max_length=20, blank=True, default="")


class SessionControl(models.Model):
    """Who holds control of a session: its creator, or who took it since (`compozy session control ID --take`).
    Others watch; their prompts are refused (409 `session_controlled_by`) unless they queue."""

    session_id = models.CharField(primary_key=True, max_length=64)
    user = models.CharField(max_length=64)
    token_id = models.CharField(max_length=40)
    taken_at = models.DateTimeField()
