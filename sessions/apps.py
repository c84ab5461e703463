from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" collides with django.contrib.sessions' label; we never install that app.
    label = "compozy_sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from compozy_site.raw_bodies import keep_request_bodies_raw

        # Register the huey jobs wherever Django runs: djhuey's `run_huey` autodiscovers only `tasks` modules,
        # and the daemon's consumer must never see a message for a task it has not registered yet.
        from sessions import jobs  # noqa: F401

        # Twisted must not parse POSTed form bodies before ASGI (a malformed multipart got a bare 400).
        keep_request_bodies_raw()
