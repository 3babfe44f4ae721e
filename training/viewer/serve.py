"""The viewer's page served on 127.0.0.1, that file alone (``gigpo-view RUN_DIR --serve``)."""

from __future__ import annotations

import http.server
import urllib.parse
from pathlib import Path
from typing import Any


def page_server(path: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1 (``port`` 0: any free one) that answers ``/`` and ``/NAME``
    (``path``'s own name) with the page as it is on disk, and 404 to every other request: the
    page needs nothing else (its style and script are inline), and the rest of its folder is
    not the server's to show.

    Raises:
        OSError: the port cannot be bound.
    """
    page = Path(path).resolve()
    routes = {"/", f"/{page.name}"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(with_body=True)

        def do_HEAD(self) -> None:
            self._answer(with_body=False)

        def _answer(self, with_body: bool) -> None:
            route = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            try:
                content = page.read_bytes() if route in routes else None
            except OSError:
                content = None
            if content is None:
                self.send_error(404, "only the viewer page is served here")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(content)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if with_body:
                self.wfile.write(content)

        def log_message(self, *args: Any) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve(path: Path, port: int = 0) -> None:
    """Serves the page ``path`` (:func:`page_server`) until interrupted.

    Raises:
        OSError: the port cannot be bound.
    """
    with page_server(path, port) as server:
        address = f"http://127.0.0.1:{server.server_address[1]}/"
        print(f"serving {address}{urllib.parse.quote(Path(path).name)} (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
