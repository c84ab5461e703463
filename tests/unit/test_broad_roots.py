"""doctor's workspace_roots check (compozy/diagnostics/doctor.py `broad_roots`): a root that holds the whole
filesystem or the user's home confines nothing."""

from __future__ import annotations

from pathlib import Path

from tests.django_env import ensure_django

ensure_django()

from compozy.diagnostics.doctor import broad_roots  # noqa: E402


def test_the_filesystem_the_home_and_its_parents_are_broad_and_a_project_is_not() -> None:
    home = Path("/home/ann")
    assert broad_roots(["/", "/home", "/home/ann", "/home/ann/src/app", "/srv/app", "/home/bob"], home) == [
        "/", "/home", "/home/ann"]
