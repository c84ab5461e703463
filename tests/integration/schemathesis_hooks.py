"""schemathesis hooks for tests/integration/test_api_contract.py (loaded through SCHEMATHESIS_HOOKS).

A check that every error answer carries the common error shape, and a path-parameter map that points about
half of the generated cases at sessions that exist, so fuzzing reaches past the 404 of a random id.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any
from urllib.parse import quote, urlencode

import schemathesis

# [[workspace_id, session_id], …] of live sessions the test created, set by the test.
TARGETS: list[list[str]] = json.loads(os.environ.get("COMPOZY_FUZZ_TARGETS", "[]"))
# Twisted (under daphne) drops a request line longer than 16 KiB without an answer, like any server's 414:
# such a URL is outside the API's contract, so cases that would need one are not sent.
MAX_REQUEST_LINE = 16384 - 64


@schemathesis.check
def error_has_a_code(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx answers `{error, code, diagnostic}` with a non-empty string code."""
    if response.status_code < 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"{response.status_code} answer is not JSON: {response.content[:200]!r}") from None
    if not isinstance(body, dict) or not isinstance(body.get("code"), str) or not body["code"]:
        raise AssertionError(f"{response.status_code} answer has no code: {body!r:.300}")
    if not isinstance(body.get("error"), str) or not isinstance(body.get("diagnostic"), dict):
        raise AssertionError(f"{response.status_code} answer lacks error/diagnostic: {body!r:.300}")
    return None


@schemathesis.hook
def map_path_parameters(ctx: Any, path_parameters: dict[str, Any]) -> dict[str, Any]:
    if not TARGETS or not path_parameters or "session_id" not in path_parameters:
        return path_parameters
    # Deterministic in the generated value, so hypothesis can replay and shrink a failure.
    pick = zlib.crc32(str(path_parameters["session_id"]).encode("utf-8", "surrogatepass"))
    if pick % 2:
        return path_parameters
    workspace_id, session_id = TARGETS[pick // 2 % len(TARGETS)]
    return {**path_parameters, "workspace": workspace_id, "session_id": session_id}


@schemathesis.hook
def filter_case(ctx: Any, case: Any) -> bool:
    path = quote(case.formatted_path, safe="/", errors="surrogatepass")
    query = urlencode(case.query or {}, doseq=True, errors="surrogatepass")
    return len(path) + len(query) + 1 < MAX_REQUEST_LINE
