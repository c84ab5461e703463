"""Everything of Compozy above the domain apps that is not the Django project, by layer (docs/architecture.md
§Layers). Below it: the domain apps `sessions`, `health`, `tasks` (Django apps), and under them `compozy_base`.

- `compozy.diagnostics`: the doctor, evidence bundles: reads across the domain apps.
- `compozy.api`: the HTTP layer (ninja routers, SSE streams, the ASGI guard, the owner router, the transport).
- `compozy_site` (settings, urls, asgi) wires the HTTP layer into one ASGI app.
- `compozy.daemon`: the launcher, the in-process huey consumer and ticker, the lease keeper.
- `compozy.cli`: the `compozy` command, over HTTP.

Each imports only those listed before it; the import-linter contracts in pyproject.toml check it.
"""
