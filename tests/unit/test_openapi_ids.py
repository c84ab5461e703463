"""The OpenAPI document's operationIds are what outside clients were generated from: moving the routers to
compozy/api/ (issue 28) must not rename one. tests/fixtures/openapi-operation-ids.json is the list main had at
3e31a16, before the move."""

from __future__ import annotations

import json

from tests.conftest import ROOT
from tests.django_env import ensure_django

ensure_django()

from compozy.api.app import api  # noqa: E402


def test_every_operation_keeps_its_operation_id() -> None:
    schema = api.get_openapi_schema(path_prefix="/api/")
    ids = sorted(op["operationId"] for path in schema["paths"].values() for op in path.values()
                 if isinstance(op, dict) and "operationId" in op)
    before = json.loads((ROOT / "tests" / "fixtures" / "openapi-operation-ids.json").read_text())
    # New operations may join (issue 49 added people, tokens, the audit log); none of these may be renamed.
    assert sorted(set(before) - set(ids)) == []
