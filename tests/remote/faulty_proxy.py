"""An HTTP proxy in front of the S3 server that answers chosen requests with an error first.

What a real store does now and then (a 500 InternalError, a 503 SlowDown under load): the client
(s3fs over botocore) must retry those with backoff, so that a run still writes, and a reader still
reads, exactly the bytes it would have without them. `rule(method, key)` says how many times a
request is answered with which status before it is passed through.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ERRORS = {
    500: b"<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>",
    503: b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
}

Rule = Callable[[str, str], tuple[int, int] | None]  # (method, path) -> (status, times) or None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        body = self._body()
        fault = self.server.fault(self.command, urlsplit(self.path).path)
        if fault is not None:
            payload = ERRORS[fault]
            self.send_response(fault)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else 0))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "connection")}
        headers["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                self.send_header(k, v)
        length = resp.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, rule: Rule) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rule = rule
        self.lock = threading.Lock()
        self.answered: dict[tuple[str, str], int] = {}  # faults answered so far, by request
        self.injected = 0

    def fault(self, method: str, path: str) -> int | None:
        got = self.rule(method, path)
        if got is None:
            return None
        status, times = got
        with self.lock:
            n = self.answered.get((method, path), 0)
            if n >= times:
                return None
            self.answered[(method, path)] = n + 1
            self.injected += 1
            return status


@contextmanager
def faulty_proxy(upstream: str, rule: Rule) -> Iterator[_Proxy]:
    """A proxy to `upstream` on a free port of 127.0.0.1 while the block runs; its URL is
    `f"http://127.0.0.1:{proxy.server_port}"`."""
    proxy = _Proxy(upstream, rule)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
