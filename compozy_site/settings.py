"""Django settings: embedded defaults for one machine, scale-out engines switched on by environment.

Embedded: SQLite catalog in COMPOZY_HOME, huey on SQLite, in-memory channel layer.
Scale-out: DATABASE_URL (postgres://..., parsed by dj-database-url) for the catalog, REDIS_URL for huey and the
channel layer, COMPOZY_NODE_ID naming this daemon among the cluster's nodes (sessions/catalog/cluster.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compozy_base.home import compozy_home

BASE_DIR = Path(__file__).resolve().parent.parent
COMPOZY_HOME = compozy_home()
COMPOZY_HOME.mkdir(parents=True, exist_ok=True, mode=0o700)

# The daemon binds to loopback only; the key only signs CSRF tokens for the local dashboard.
SECRET_KEY = os.environ.get("COMPOZY_SECRET_KEY", "compozy-local-daemon-loopback-only")
DEBUG = os.environ.get("COMPOZY_DEBUG") == "1"
# The ASGI guard (compozy/api/guard.py) checks Host for every route, the SSE consumers included, and answers in
# the API's JSON error shape; Django's own check would see only half the routes.
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.contenttypes",
    "django.contrib.staticfiles",
    "channels",
    # Only for its templates and static files: /api/docs then loads Swagger UI from this daemon, not from a CDN.
    "ninja",
    "huey.contrib.djhuey",
    "memory.apps.MemoryConfig",
    "sessions.apps.SessionsConfig",
    "tasks.apps.TasksConfig",
    "health.apps.HealthConfig",
    "dreams.apps.DreamsConfig",
    "coordination.apps.CoordinationConfig",
    "accounts.apps.AccountsConfig",
    "attention.apps.AttentionConfig",
    "frontend.apps.FrontendConfig",
]

MIDDLEWARE = [
    # Outermost, so every non-JSON error answer under /api/ is rewritten into the common error shape.
    "compozy.api.app.json_error_middleware",
    # Django's own, their hooks run on the loop rather than one thread hop each (compozy/api/inline_middleware.py).
    "compozy.api.inline_middleware.SecurityMiddleware",
    "compozy.api.inline_middleware.CommonMiddleware",
    "compozy.api.inline_middleware.CsrfViewMiddleware",
    "compozy.api.inline_middleware.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "compozy_site.urls"
ASGI_APPLICATION = "compozy_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]


def _database_from_env() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL", "")
    if url:
        import dj_database_url  # only scale-out needs it; the embedded default never imports it

        # dj-database-url keeps ?sslmode=…, options and the rest of the query string in OPTIONS.
        return dict(dj_database_url.parse(url))
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": COMPOZY_HOME / "catalog.sqlite3",
        # IMMEDIATE avoids SQLITE_BUSY upgrades when the daemon, huey and manage.py write together.
        "OPTIONS": {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


DATABASES = {"default": _database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
    HUEY = {"huey_class": "huey.RedisHuey", "name": "compozy", "url": REDIS_URL, "immediate": False}
else:
    # The store is the truth; the channel layer is only a doorbell, so its drops are harmless.
    CHANNEL_LAYERS = {"default": {"BACKEND": "compozy_site.channel_layer.DoorbellLayer", "CONFIG": {"capacity": 1000}}}
    HUEY = {
        "huey_class": "huey.SqliteHuey",
        "name": "compozy",
        "filename": str(COMPOZY_HOME / "huey.sqlite3"),
        "immediate": os.environ.get("COMPOZY_HUEY_IMMEDIATE") == "1",
    }

STATIC_URL = "/static/"
USE_TZ = True
TIME_ZONE = "UTC"

# CSRF for the dashboard's forms; the ASGI guard refuses cross-origin requests before Django runs.
CSRF_TRUSTED_ORIGINS: list[str] = []
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
X_FRAME_OPTIONS = "DENY"
# Bodies are capped before Django reads them ([http] max_body_bytes, in the guard and in daphne's request);
# Django's own limit would answer the same case with a 400 of its own.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "compozy.daemon.logs.RedactFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("COMPOZY_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "huey": {"level": "WARNING"},
    },
}
