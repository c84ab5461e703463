"""The accounts app's refusals, answered in the API's one error shape (compozy/api/app.py maps them)."""

from __future__ import annotations


class AccountError(Exception):
    def __init__(self, status: int, code: str, message: str, data: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.data = status, code, message, data
