#!/usr/bin/env python3
"""An HTTP proxy that misbehaves on purpose, in front of nginx or moto's S3
server, to test how hpctrain reads shards over a bad network.

For each path (query ignored), counting GET requests:
  --fail N      the first N are answered with --fail-status (503) and an
                S3-style error body, without reaching the server;
  --cut N       the next N are forwarded but cut: the connection is closed
                after a random part of the body (never all of it);
  --delay S     every answer's first byte waits S seconds;
  --rate B      bodies are sent at about B bytes per second.
Everything else (other methods, later requests) passes through. Requests
keep their Host header, so moto still verifies signed S3 requests behind it.

Each fault is logged as one JSON line on stdout ({"fault": "cut", "path":
..., "at": byte}); the first line is "listening on PORT".
"""
import http.client
import http.server
import json
import random
import threading
import time

import front_server

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    opts = None
    counts = {}
    lock = threading.Lock()
    rng = random.Random(1)

    def log_message(self, fmt, *args):
        pass

    def event(self, **kw):
        with self.lock:
            print(json.dumps(kw), flush=True)

    def handle_any(self):
        o = self.opts
        path = self.path.split("?")[0]
        n = int(self.headers.get("Content-Length", "0") or 0)
        body = self.rfile.read(n) if n else b""
        nth = 0
        if self.command == "GET":
            with self.lock:
                nth = self.counts.get(path, 0)
                self.counts[path] = nth + 1
        if o.delay:
            time.sleep(o.delay)
        if self.command == "GET" and nth < o.fail:
            self.event(fault="status", status=o.fail_status, path=path)
            msg = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ServiceUnavailable</Code>"
                   b"<Message>fault proxy</Message></Error>")
            self.send_response(o.fail_status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        cut = self.command == "GET" and nth < o.fail + o.cut
        conn = http.client.HTTPConnection("127.0.0.1", o.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn.request(self.command, self.path, body=body if body else None, headers=headers)
        resp = conn.getresponse()
        length = int(resp.getheader("Content-Length", "-1"))
        stop_at = -1
        if cut and resp.status in (200, 206) and length > 1:
            with self.lock:
                stop_at = self.rng.randrange(1, length)
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        if length < 0 and self.command != "HEAD":
            data = resp.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()
            return
        self.end_headers()
        sent = 0
        t0 = time.monotonic()
        while self.command != "HEAD":
            chunk = resp.read(16384)
            if not chunk:
                break
            if stop_at >= 0 and sent + len(chunk) >= stop_at:
                self.wfile.write(chunk[:stop_at - sent])
                self.wfile.flush()
                self.event(fault="cut", path=path, at=stop_at, of=length)
                self.close_connection = True
                conn.close()
                return
            self.wfile.write(chunk)
            sent += len(chunk)
            if o.rate:
                ahead = sent / o.rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def main():
    ap = front_server.arguments()
    ap.add_argument("--fail", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=503)
    ap.add_argument("--cut", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0)
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--seed", type=int, default=1)
    Proxy.opts = ap.parse_args()
    Proxy.rng = random.Random(Proxy.opts.seed)
    front_server.serve(Proxy.opts.listen, Proxy)


if __name__ == "__main__":
    main()
