"""Memory's errors, each with a stable code the API maps to its status (compozy/api/app.py)."""

from __future__ import annotations


class MemoryFailure(Exception):
    status = 400
    code = "invalid_request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 data: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status:
            self.status = status
        self.data = data or {}


class InvalidMemory(MemoryFailure):
    status, code = 400, "invalid_memory"


class MemoryNotFound(MemoryFailure):
    status, code = 404, "memory_not_found"


class MemoryConflict(MemoryFailure):
    status, code = 409, "memory_conflict"
