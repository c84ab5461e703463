"""`GET /metrics`: the daemon's Prometheus metrics (compozy_base/metrics.py), in the text format.

Sessions by state are read from the catalog at scrape time by a collector, so they are never out of step with the
catalog; the view is a sync Django view, which Django runs in a worker thread, so that query never runs on the
event loop.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from compozy_base.metrics import REGISTRY
from sessions.core.enums import SessionState
from sessions.models import Session


class SessionsByState(Collector):
    """`compozy_sessions{state=…}` from the catalog at scrape time; every state is present, zero or not."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = {s.value: 0 for s in SessionState}
        for row in Session.objects.values("state").annotate(n=Count("id")).order_by():
            counts[row["state"]] = row["n"]
        family = GaugeMetricFamily("compozy_sessions", "Sessions in the catalog, by state.", labels=["state"])
        for state, n in sorted(counts.items()):
            family.add_metric([state], n)
        yield family

    def describe(self) -> list[GaugeMetricFamily]:
        # Described without a query, so registering the collector never touches the database.
        return [GaugeMetricFamily("compozy_sessions", "Sessions in the catalog, by state.", labels=["state"])]


REGISTRY.register(SessionsByState())


@csrf_exempt  # read-only: a POST gets a 405, not a CSRF page
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format; sync on purpose: Django runs it in a thread, off the event loop."""
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
