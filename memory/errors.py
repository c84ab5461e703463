"""Memory's errors, each with a stable code the API maps to its status (compozy/api/app.py)."""

from __future__ import annotations

from compozy_base.errors import CodedError


class MemoryFailure(CodedError):
    """Memory's refusals (compozy_base/errors.py `CodedError`)."""


class InvalidMemory(MemoryFailure):
    status, code = 400, "invalid_memory"


class MemoryNotFound(MemoryFailure):
    status, code = 404, "memory_not_found"


class MemoryConflict(MemoryFailure):
    status, code = 409, "memory_conflict"
