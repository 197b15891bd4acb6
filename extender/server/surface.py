"""Who can reach what: the verb port (loopback, or TLS with client certificates) and a
probe port that answers only ``/healthz``, ``/readyz`` and ``/metrics``.

Why the probe port is a second, small server and not a second gunicorn listener: gunicorn's
TLS settings apply to every socket it binds, so with the verbs on mutual TLS the probes would
need a client certificate too, which the kubelet cannot present. The probe server runs in the
gunicorn worker (where the app and its state live), on a socket bound in the master before
gunicorn starts, so a busy port fails ``muster serve`` at start with a message, and a worker
that gunicorn restarts serves the same socket again. It routes nothing but the three paths:
a request for ``/bind`` there never reaches the app.
"""

from __future__ import annotations

import io
import logging
import os
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

log = logging.getLogger("muster.surface")

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

WSGIApp = Callable[..., Any]


class SurfaceError(Exception):
    """A listening socket or TLS file cannot be used; the message names which and why."""


def tls_options(cert: str, key: str, client_ca: str) -> dict[str, Any]:
    """gunicorn settings for TLS where the TLS layer itself refuses a client without a
    certificate chaining to ``client_ca`` (before any HTTP is read)."""
    return {"certfile": cert, "keyfile": key, "ca_certs": client_ca,
            "cert_reqs": ssl.CERT_REQUIRED}


def check_tls(cert: str, key: str, client_ca: str) -> None:
    """Load the files as gunicorn will, so a wrong path, a key that does not match or a CA
    that is not PEM fails at start instead of at kube-scheduler's first call."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certfile=cert, keyfile=key)
    except (OSError, ssl.SSLError) as err:
        raise SurfaceError(f"cannot use --tls-cert {cert} with --tls-key {key}: "
                           f"{_reason(err)}") from None
    try:
        context.load_verify_locations(cafile=client_ca)
    except (OSError, ssl.SSLError) as err:
        raise SurfaceError(f"cannot use --tls-client-ca {client_ca}: {_reason(err)}") from None


def _reason(err: OSError | ssl.SSLError) -> str:
    if isinstance(err, ssl.SSLError):
        return err.reason or str(err)
    return err.strerror or str(err)


def bind_probe_socket(host: str, port: int, *, what: str = "the probe port") -> socket.socket:
    """A side port's listening socket (the probes', the webhook's), bound now (in the process
    that starts gunicorn)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(64)
    except OSError as err:
        sock.close()
        raise SurfaceError(f"cannot listen on {what} {host}:{port}: "
                           f"{err.strerror or err}") from None
    return sock


def probe_only(app: WSGIApp, *, verb_port: int) -> WSGIApp:
    """``app`` restricted to GET/HEAD of the probe paths; anything else is a 404 that says
    where the verbs are, without the app seeing the request."""
    refusal = (f'{{"error": "not served on the probe port; the extender verbs answer on '
               f'port {verb_port} only"}}').encode()
    return _restricted(app, PROBE_PATHS, ("GET", "HEAD"), refusal)


def _restricted(app: WSGIApp, paths: frozenset[str], methods: tuple[str, ...],
                refusal: bytes) -> WSGIApp:
    """``app`` for ``methods`` of ``paths`` only; a 404 with ``refusal`` for the rest."""

    def restricted(environ: dict[str, Any],
                   start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in paths and environ.get("REQUEST_METHOD") in methods:
            result: Iterable[bytes] = app(environ, start_response)
            return result
        start_response("404 Not Found", [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(refusal)))])
        return [refusal]

    return restricted


class _QuietHandler(WSGIRequestHandler):
    timeout = 10  # seconds: a client that connects and sends nothing cannot hold a thread

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("probe-port " + format, *args)


class _ProbeServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock.getsockname()[:2], _QuietHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_bind()

    def server_bind(self) -> None:
        # The socket is already bound and listening; HTTPServer's own server_bind would bind
        # again and look the host up in DNS.
        host, port = self.socket.getsockname()[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()


def serve_probes(app: WSGIApp, sock: socket.socket, *, verb_port: int) -> threading.Thread:
    """Answer the probe paths of ``app`` on ``sock`` from a daemon thread."""
    server = _ProbeServer(sock)
    server.set_app(probe_only(app, verb_port=verb_port))
    thread = threading.Thread(target=server.serve_forever, name="probe-port", daemon=True)
    thread.start()
    return thread


WEBHOOK_PATHS = frozenset({"/admission/gate"})

WEBHOOK_CONNECTIONS = 64
"""Connections the webhook port serves at once, each on its own thread. The API server keeps a
few to a webhook; the bound keeps clients that connect and idle from taking threads without
end. A connection beyond it is closed at once (the API server retries on another, or creates
the pod ungated: ``failurePolicy: Ignore``)."""


class CertFiles:
    """A serving certificate and key read from files, read again when either changes (a
    Secret that cert-manager or a person rotated), the last good pair kept otherwise."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert, self.key = cert, key
        self._lock = threading.Lock()
        self._stamp: tuple[float, ...] | None = None
        self._context: ssl.SSLContext | None = None

    def load(self) -> ssl.SSLContext:
        """A new server context from the files; raises :class:`SurfaceError`."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(certfile=self.cert, keyfile=self.key)
        except (OSError, ssl.SSLError) as err:
            raise SurfaceError(f"cannot use --webhook-cert {self.cert} with --webhook-key "
                               f"{self.key}: {_reason(err)}") from None
        return context

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = tuple(x for p in (self.cert, self.key)
                              for x in (os.stat(p).st_mtime, os.stat(p).st_size))
            except OSError:
                stamp = self._stamp or ()
            if self._context is None or stamp != self._stamp:
                try:
                    self._context = self.load()
                    self._stamp = stamp
                except SurfaceError as err:
                    if self._context is None:
                        raise
                    log.warning("event=webhook-cert-not-reloaded problem=%r", str(err))
                    self._stamp = stamp
            return self._context


def webhook_only(app: WSGIApp) -> WSGIApp:
    """``app`` restricted to POST of the admission path; anything else is a 404."""
    return _restricted(app, WEBHOOK_PATHS, ("POST",),
                       b'{"error": "the webhook port answers only POST /admission/gate"}')


WEBHOOK_BODY = 8 * 1024 * 1024 + 65536
"""The largest request body read ahead on a kept-alive connection (the admission route's own
bound, :data:`extender.server.admission.MAX_BODY`, plus room); a larger one is left to the
route, which refuses it unread, and the connection is closed after the answer."""

IDLE = 120.0
"""Seconds a kept-alive connection may wait for its next request. Longer than Go's idle
timeout for the API server's webhook client (90 s), so the client, not Muster, closes an
idle connection: a request written just as the server closed it would fail, and fail the
pod's gate (``failurePolicy: Ignore`` creates it ungated)."""


class _ServerHandler11(ServerHandler):
    http_version = "1.1"
    sized = False
    """Whether the answer said its length (else it closes the connection)."""
    closing = False
    """Whether the connection closes after this answer anyway (the client is told)."""

    def cleanup_headers(self) -> None:
        super().cleanup_headers()
        headers = getattr(self, "headers", None)  # set by start_response
        self.sized = headers is not None and "Content-Length" in headers
        if (self.closing or not self.sized) and headers is not None:
            headers["Connection"] = "close"


class _KeepAliveHandler(_QuietHandler):
    """HTTP/1.1 with persistent connections: the API server sends every pod's review on a
    connection it keeps, so each costs one request, not a TCP connection, a TLS handshake and
    a thread (about 60 times what deciding the review costs). A connection closes when the
    client asks, after an answer without a length, after a body that was not read ahead
    (chunked or too large), or after :data:`IDLE` seconds without a request."""

    protocol_version = "HTTP/1.1"
    # The answer (status line, headers, body: several writes) is buffered and sent with one
    # TLS write when the request is done. Each write releases the interpreter lock and must
    # take it back, and with Muster's other threads busy (a burst of pods) every take waits
    # up to the switch interval: unbuffered, a review's answer cost several such waits.
    wbufsize = 64 * 1024
    # A pod's review (headers and a body of some KB) is read with one read, not several.
    rbufsize = 64 * 1024

    def handle(self) -> None:
        # The first request must come as fast as any (a client that connects and sends
        # nothing holds a thread ``timeout`` seconds, as before); between requests the
        # connection may idle for IDLE.
        self.close_connection = True
        self._one(self.timeout)
        while not self.close_connection:
            self._one(IDLE)

    def _one(self, idle: float) -> None:
        try:
            self.connection.settimeout(idle)
            self.raw_requestline = self.rfile.readline(65537)
            self.connection.settimeout(self.timeout)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                self.close_connection = True
                return
            if not self.parse_request():  # an error was sent; parse_request said to close
                return
            environ = self.get_environ()
            body = self._read_ahead()
            if body is None:
                self.close_connection = True
            handler = _ServerHandler11(body or self.rfile, self.wfile,  # type: ignore[arg-type]
                                       self.get_stderr(), environ, multithread=True)
            handler.closing = self.close_connection
            handler.request_handler = self  # type: ignore[attr-defined]
            handler.run(self.server.get_app())  # type: ignore[attr-defined]
            if not handler.sized:
                self.close_connection = True  # the client reads such an answer to the end
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True

    def _read_ahead(self) -> io.BytesIO | None:
        """The request's body, read now so whatever the app leaves unread cannot be taken for
        the next request; ``None`` when it cannot be (chunked, no valid length, too large):
        the app reads the connection itself, and the connection closes after this answer."""
        if self.headers.get("Transfer-Encoding"):
            return None
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            return None
        if not 0 <= length <= WEBHOOK_BODY:
            return None
        return io.BytesIO(self.rfile.read(length) if length else b"")


class _WebhookServer(_ProbeServer):
    """The probe server's shape, with TLS and HTTP/1.1 keep-alive: the handshake runs on the
    connection's thread, so a client that connects and stalls holds no other request up; at
    most ``connections`` at once."""

    def __init__(self, sock: socket.socket, certs: CertFiles, *, connections: int) -> None:
        super().__init__(sock)
        self._certs = certs
        self._limit = max(1, connections)
        self._slots = threading.BoundedSemaphore(self._limit)
        self.RequestHandlerClass = _KeepAliveHandler

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("event=webhook-connection-refused client=%s reason='%d connections "
                        "open, the most the webhook port serves'", client_address, self._limit)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The answer goes out in several writes (status and headers, then the body): with
        # Nagle's algorithm the body waits for the client's delayed ACK, 40 ms a review.
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            tls = self._certs.context().wrap_socket(request, server_side=True,
                                                    do_handshake_on_connect=False)
        except (OSError, ssl.SSLError, SurfaceError) as err:
            log.warning("event=webhook-tls-failed problem=%r", str(err))
            return
        try:
            tls.settimeout(_QuietHandler.timeout)
            tls.do_handshake()
            self.RequestHandlerClass(tls, client_address, self)  # type: ignore[arg-type]
        except (OSError, ssl.SSLError) as err:
            log.debug("event=webhook-connection-failed client=%s problem=%r", client_address,
                      str(err))
        finally:
            tls.close()


def serve_webhook(app: WSGIApp, sock: socket.socket, certs: CertFiles, *,
                  connections: int = WEBHOOK_CONNECTIONS) -> threading.Thread:
    """Answer the admission path of ``app`` over TLS on ``sock`` from a daemon thread, on at
    most ``connections`` connections at once."""
    server = _WebhookServer(sock, certs, connections=connections)
    server.set_app(webhook_only(app))
    thread = threading.Thread(target=server.serve_forever, name="webhook-port", daemon=True)
    thread.start()
    return thread
