from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" collides with django.contrib.sessions' label; we never install that app.
    label = "compozy_sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from compozy_site.raw_bodies import keep_request_bodies_raw

        keep_request_bodies_raw()
