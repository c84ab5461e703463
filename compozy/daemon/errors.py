"""How a daemon start or stop fails, in the CLI's documented exit classes: the one daemon in the foreground
(launcher.py) and the CLI starting or stopping it in the background (background.py) raise the same."""

from __future__ import annotations


class DaemonError(RuntimeError):
    """A start that failed; `exit_code` is the CLI's documented class (69 unavailable, 78 invalid config)."""

    def __init__(self, message: str, exit_code: int = 69) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class DaemonAlreadyRunning(DaemonError):
    """This home's daemon runs already: a conflict (exit 65), not a failed start."""
