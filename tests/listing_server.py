"""A loopback HTTP server answering GET paths as a test says: an API's model listings, with the
shapes a real one may send (JSON, an HTML page, a redirect, a 404)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        status, kind, body = self.server.routes.get(self.path, (404, "application/json", b"{}"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        if 300 <= status < 400:
            self.send_header("Location", "https://elsewhere.example/api/v1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class ListingServer:
    """``with ListingServer() as server``: ``server.routes[path] = (status, type, body)``, and
    ``server.base_url`` ends in /api/v1 as OpenRouter's does."""

    def __enter__(self) -> ListingServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.routes = {}
        self.routes = self._server.routes
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/api/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
