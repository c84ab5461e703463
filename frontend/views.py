from django.http import HttpRequest, HttpResponse


def dashboard(request: HttpRequest) -> HttpResponse:
    return HttpResponse("<!doctype html><title>Compozy</title><h1>Compozy daemon</h1>", content_type="text/html")
