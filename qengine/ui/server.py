"""The web UI's HTTP server: a Flask app serving the pages (static files that draw what the JSON
API gives) and the JSON API itself, run by Werkzeug's threaded server in a daemon thread.

Every request needs the cluster token, as every other door of a cluster does: as
``Authorization: Bearer TOKEN`` (scripts), or as the cookie a browser gets from ``?token=`` on
any page or from the login form. The cookie holds a keyed digest of the token, not the token,
and is HttpOnly and SameSite=Strict; the pages load no script or style from anywhere else
(a Content-Security-Policy says so), and nothing but the login changes any state.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, abort, jsonify, redirect, render_template, request
from werkzeug.serving import make_server

from qengine.errors import OperationalError, ProgrammingError
from qengine.ui.views import query_detail, query_summary, queued_statement, worker_views

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
COOKIE = "qengine_ui"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
PAGES = {"queries": "Queries", "query": "Query", "workers": "Workers"}  # each page's template name → title
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # a page opened with ?token= must not pass it on
    "Cache-Control": "no-store",
}
LOGIN_FORM = """<!doctype html><html><head><meta charset="utf-8"><title>qengine: log in</title>
<link rel="icon" href="data:,"></head><body><main><h1>qengine</h1>
<form method="post" action="/login"><label>Cluster token <input type="password" name="token" autofocus></label>
<button type="submit">Log in</button></form>{message}</main></body></html>"""


def _digest(token: str) -> str:
    """What the cookie holds: a keyed digest of the token (the token itself never sits in a cookie jar)."""
    return hmac.new(token.encode(), b"qengine web UI", hashlib.sha256).hexdigest()


def _page(name: str) -> str:
    """A page: the shared layout (``templates/base.html``) around what the page draws into."""
    return render_template(f"{name}.html", page=name, title=PAGES[name])


def create_app(cluster: Any, token: str, waiting: Callable[[], list[dict]] | None = None) -> Flask:
    """The app over ``cluster`` (a LocalCluster or a coordinator's WorkerRegistry: their
    ``history``, ``worker_states()``, ``load`` and ``pool``); ``waiting`` gives the statements
    a standalone coordinator holds back (``Admission.waiting``)."""
    app = Flask("qengine.ui", static_folder=STATIC, static_url_path="/static", template_folder=TEMPLATES)
    app.json.sort_keys = False
    cookie_value = _digest(token)

    def authorized() -> bool:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and hmac.compare_digest(header[len("Bearer "):].encode(), token.encode()):
            return True
        return hmac.compare_digest(request.cookies.get(COOKIE, "").encode(), cookie_value.encode())

    def with_cookie(response: Response) -> Response:
        response.set_cookie(COOKIE, cookie_value, httponly=True, samesite="Strict", secure=request.is_secure)
        return response

    @app.before_request
    def check_token() -> Any:
        if request.endpoint == "login":
            return None
        given = request.args.get("token")
        if given is not None:  # a base64 token's "+" arrives as a space unless the user encoded it
            given = given.replace(" ", "+")
        if given is not None and request.method == "GET" and hmac.compare_digest(given.encode(), token.encode()):
            # The token leaves the address bar; "/" + the path without its leading slashes, so
            # that a path such as //host/ is not taken for another site.
            return with_cookie(redirect("/" + request.path.lstrip("/"), code=303))
        if authorized():
            return None
        if request.path.startswith("/api/"):
            response = jsonify({"error": "the cluster token is needed: Authorization: Bearer TOKEN"})
            response.headers["WWW-Authenticate"] = 'Bearer realm="qengine"'
            return response, 401
        message = "<p class=error>That is not the cluster token.</p>" if given is not None else ""
        return LOGIN_FORM.format(message=message), 401

    @app.after_request
    def secure(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.post("/login")
    def login() -> Any:
        given = request.form.get("token", "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return LOGIN_FORM.format(message="<p class=error>That is not the cluster token.</p>"), 401
        return with_cookie(redirect("/", code=303))

    @app.get("/")
    def queries_page() -> str:
        return _page("queries")

    @app.get("/queries/<query_id>")
    def query_page(query_id: str) -> str:
        return _page("query")

    @app.get("/workers")
    def workers_page() -> str:
        return _page("workers")

    def queued() -> dict[str, dict]:
        return {entry["query"]: entry for entry in waiting()} if waiting is not None else {}

    @app.get("/api/queries")
    def api_queries() -> Response:
        held = queued()
        records = cluster.history.records()
        known = {r.id for r in records}
        not_started = [queued_statement(e) for q, e in held.items() if q not in known]
        return jsonify(not_started + [query_summary(r, held) for r in records])

    @app.get("/api/queries/<query_id>")
    def api_query(query_id: str) -> Response:
        record = cluster.history.get(query_id)
        if record is not None:
            return jsonify(query_detail(record, queued()))
        entry = queued().get(query_id)
        if entry is None:
            abort(404)
        return jsonify(queued_statement(entry) | {"edges": [], "spans": [], "pushes": [], "shuffles": [], "recovery": None})

    @app.get("/api/workers")
    def api_workers() -> Response:
        return jsonify(worker_views(cluster, cluster.history.records()))

    @app.errorhandler(404)
    def not_found(e: Exception) -> Any:
        if request.path.startswith("/api/"):
            return jsonify({"error": f"no such statement or page: {request.path}"}), 404
        return "<!doctype html><title>qengine</title><p>Not found. <a href=\"/\">Queries</a></p>", 404

    return app


class UiServer:
    """The web UI of one cluster, served in a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        cluster: Any,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        waiting: Callable[[], list[dict]] | None = None,
        tls_files: tuple[str, str] | None = None,
    ) -> None:
        """``tls_files`` (certificate file, key file) serves HTTPS, as the coordinator's own TLS."""
        if not token:
            raise ProgrammingError("the web UI needs a cluster token")
        app = create_app(cluster, token, waiting)
        try:
            self._server = make_server(host, port, app, threaded=True, ssl_context=tls_files)
        except OSError as e:
            raise OperationalError(f"cannot serve the web UI on {host}:{port}: {e.strerror or e}") from e
        scheme = "https" if tls_files else "http"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{shown}:{self._server.server_port}/"
        self._token = token
        # Werkzeug logs every request at INFO: a page polling once a second would flood a coordinator's log.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._thread = threading.Thread(target=self._server.serve_forever, name="web-ui", daemon=True)
        self._thread.start()

    @property
    def login_url(self) -> str:
        """The address that logs a browser in (sets the cookie): for whoever holds the token."""
        return f"{self.url}?token={self._token}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
