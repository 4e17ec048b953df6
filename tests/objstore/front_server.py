"""The threaded HTTP server under the test's fault proxy (fault_proxy.py):
a client that hangs up mid-answer is not logged as an error, since the
fault proxy does that on purpose."""
import argparse
import http.server
import sys


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def arguments():
    """The options the proxy takes: --listen PORT (0: any free port) and
    --upstream PORT; it adds its own."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, default=0)
    ap.add_argument("--upstream", type=int, required=True)
    return ap


def serve(port, handler):
    """Serves on 127.0.0.1:port until killed; prints "listening on PORT" once ready."""
    server = Server(("127.0.0.1", port), handler)
    print("listening on %d" % server.server_address[1], flush=True)
    server.serve_forever()
