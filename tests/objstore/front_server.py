"""The threaded HTTP server under the test's fronts (s3_sigcheck.py,
fault_proxy.py): a client that hangs up mid-answer is not logged as an
error, since the fault proxy does that on purpose."""
import http.server
import sys


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
