"""The HTTP server base the emulators share: 127.0.0.1 only, daemon threads, quiet about clients
that hang up (a preempted agent drops its hanging GET; that is not an error)."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)):
            return
        super().handle_error(request, client_address)
