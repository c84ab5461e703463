"""The page an action link opens (issue 49): `GET /a/<link>` shows what it answers and one button (a question's
`answer` link: the question's form), `POST` (what the button sends) carries it out. No sign-in: the link is the
credential (accounts/links.py), bound to one request, answerable once. A used, expired or altered link answers a
clear page and changes nothing.

A caller that asks for JSON (`Accept: application/json`) gets the API's error shape instead of the page.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.csrf import csrf_exempt

from accounts import links
from accounts import services as accounts
from accounts.errors import AccountError
from accounts.links import OpenedLink
from compozy_base.errors import error_body
from frontend import question_form
from sessions import services
from sessions.core.errors import CompozyError
from sessions.core.live import ElicitationView

# No script at all; the form posts back to this same address.
LINK_CSP = ("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; "
            "frame-ancestors 'none'")
PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>Compozy: {heading}</title>
<style>body{{font:17px/1.5 system-ui,sans-serif;max-width:32em;margin:2em auto;padding:0 1em}}
button{{font-size:1.1em;padding:.6em 1.4em;border-radius:.4em;border:1px solid #888}}
.approve{{background:#1f7a3a;color:#fff}}.deny{{background:#a32020;color:#fff}}</style></head>
<body><h1>{heading}</h1><p>{text}</p>{form}<p hidden data-code="{code}">{code}</p></body></html>"""


def _page(status: int, code: str, heading: str, text: str, form: str = "") -> HttpResponse:
    body = format_html(PAGE, heading=heading, text=text, form=format_html(form) if form else "", code=code)
    response = HttpResponse(body, status=status, content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = LINK_CSP
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"  # the link must not leak to anything the page might reach
    response["X-Compozy-Code"] = code
    return response


def _refusal(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    if "application/json" in request.headers.get("Accept", ""):
        response = JsonResponse(error_body(message, code, status), status=status)
        response["Cache-Control"] = "no-store"
        return response
    return _page(status, code, "This link cannot be used", message)


def _form(link: OpenedLink) -> str:
    label = link.action.value.capitalize()
    css = "approve" if link.action in (links.LinkAction.APPROVE, links.LinkAction.ANSWER) else "deny"
    return format_html('<form method="post"><button class="{}" type="submit">{}</button></form>', css, label)


async def _question(link: OpenedLink) -> ElicitationView | None:
    """The question a question's link answers, while it waits (its schema is the form)."""
    waiting = (await services.list_elicitations(link.session_id, link.workspace_id))["elicitations"]
    return next((q for q in waiting if q["id"] == link.request_id), None)


async def _show(request: HttpRequest, link: OpenedLink) -> HttpResponse:
    """GET: what the link answers, and its one button (or the question's form). Nothing is answered yet."""
    if link.kind == links.LinkKind.PERMISSION:
        verb = "Approve" if link.action == links.LinkAction.APPROVE else "Deny"
        return _page(200, "open", f"{verb} this request?", link.title or link.request_id, _form(link))
    question = await _question(link)
    if question is None:
        return _refusal(request, 404, "elicitation_not_found", "this question is no longer waiting for an answer")
    if link.action == links.LinkAction.DECLINE:
        return _page(200, "open", "Decline this question?", question["message"], _form(link))
    return _page(200, "open", "The agent asks", question["message"], question_form.render(question["requested_schema"]))


async def _answer(request: HttpRequest, link: OpenedLink) -> tuple[str, dict[str, Any]]:
    """Carry the link's action out with its maker's authority, as `webhook-link`: (audit action, JSON answer)."""
    if link.kind == links.LinkKind.PERMISSION:
        decided = await services.decide_permission(link.session_id, link.request_id, link.action.value, None,
                                                   link.workspace_id, actor=link.actor)
        return "session.permission", {"permission": decided["permission"]}
    if link.action == links.LinkAction.DECLINE:
        answered = await services.answer_elicitation(link.session_id, link.request_id, "decline", None,
                                                     link.workspace_id, actor=link.actor)
    else:
        question = await _question(link)
        schema = question["requested_schema"] if question is not None else {}
        answered = await services.answer_elicitation(link.session_id, link.request_id, "accept",
                                                     question_form.content(schema, request.POST),
                                                     link.workspace_id, actor=link.actor)
    return "session.answer", {"elicitation": answered["elicitation"]}


async def _carry_out(request: HttpRequest, link: OpenedLink, now: datetime) -> HttpResponse:
    await sync_to_async(links.spend)(link, now)
    try:
        action, answer = await _answer(request, link)
    except CompozyError as exc:
        await sync_to_async(links.unspend)(link)  # a refusal spends nothing
        return _refusal(request, exc.status, exc.code, exc.message)
    outcome = answer.get("permission", {}).get("decision") or answer.get("elicitation", {}).get("action") or ""
    await sync_to_async(accounts.record)(link.actor, action, now, method="POST",
                                         path=f"{links.LINK_PREFIX}{link.link_id}", session_id=link.session_id,
                                         status=200, detail={"link_id": link.link_id, "request_id": link.request_id,
                                                             "decision": outcome})
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(answer)
    return _page(200, "done", outcome.capitalize() or "Done", link.title or link.request_id)


@csrf_exempt  # no cookie is involved: the link is the credential, and the guard refuses cross-site posts
async def action_link(request: HttpRequest, link: str) -> HttpResponse:
    if request.method not in ("GET", "HEAD", "POST"):
        return _refusal(request, 405, "method_not_allowed", "open the link, then press its button")
    now = timezone.now()
    try:
        opened = await sync_to_async(links.open_link)(link, now)
    except AccountError as exc:
        return _refusal(request, exc.status, exc.code, exc.message)
    if request.method != "POST":  # a link preview or the person opening it: nothing is answered yet
        return await _show(request, opened)
    return await _carry_out(request, opened, now)
