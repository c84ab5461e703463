"""The accounts app's refusals, answered in the API's one error shape (compozy/api/app.py maps them)."""

from __future__ import annotations

from compozy_base.errors import CodedError


class AccountError(CodedError):
    """People's and tokens' refusals (compozy_base/errors.py `CodedError`), status and code given first."""

    def __init__(self, status: int, code: str, message: str, data: dict[str, object] | None = None) -> None:
        super().__init__(message, code=code, status=status, data=data)
