#!/usr/bin/env python3
"""A signature-checking front for s3rver, which does not verify AWS
Signature V4 itself (and lets anonymous requests through).

Every request must carry an "AWS4-HMAC-SHA256" Authorization header from a
known access key. The front rebuilds the canonical request from what it
received (method, raw path, query, the headers the client listed as signed,
the x-amz-content-sha256 value) and recomputes the signature with
botocore's own signer (botocore.auth.S3SigV4Auth, Debian's
python3-botocore), then compares. A missing signature, an unknown key, a
mismatch, a payload whose SHA-256 differs from the one signed, or a date
more than 15 minutes off is refused with S3's error document (403 and the
code S3 uses); anything else is forwarded to s3rver unchanged and its
answer streamed back.

Usage: s3_sigcheck.py --listen PORT --upstream PORT --keys AK:SECRET[,AK:SECRET] [--region R]
Prints "listening on PORT" once ready (PORT 0: any free port).
"""
import datetime
import hashlib
import hmac
import http.client
import http.server
import re
import sys

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

import front_server

AUTH_RE = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
    r"SignedHeaders=([^,]+),\s*Signature=([0-9a-f]+)")
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def s3_error(code, message):
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message>"
            "<RequestId>sigcheck</RequestId></Error>" % (code, message)).encode()


class Front(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    keys = {}
    region = "us-east-1"
    upstream = 0
    refused = 0

    def log_message(self, fmt, *args):
        pass

    def refuse(self, code, message):
        Front.refused += 1
        sys.stderr.write("sigcheck: refused %s %s: %s (%s)\n" % (self.command, self.path, code, message))
        sys.stderr.flush()
        body = s3_error(code, message)
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(n) if n else b""

    def check(self, body):
        """None when the signature holds, else (code, message)."""
        auth = self.headers.get("Authorization")
        if not auth:
            return ("AccessDenied", "Anonymous requests are refused: no Authorization header")
        m = AUTH_RE.match(auth)
        if not m:
            return ("AccessDenied", "Only AWS4-HMAC-SHA256 signatures are accepted")
        key, day, region, service, signed, signature = m.groups()
        if key not in self.keys:
            return ("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
        amz_date = self.headers.get("X-Amz-Date", "")
        try:
            when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return ("AccessDenied", "Missing or malformed X-Amz-Date")
        if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 900:
            return ("RequestTimeTooSkewed", "The difference between the request time and the current time is too large.")
        payload_hash = self.headers.get("X-Amz-Content-SHA256")
        if payload_hash is None:
            return ("InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
        if payload_hash not in ("UNSIGNED-PAYLOAD",) and payload_hash != hashlib.sha256(body).hexdigest():
            return ("XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
        headers = {}
        for name in signed.split(";"):
            value = self.headers.get(name)
            if value is None:
                return ("SignatureDoesNotMatch", "Signed header %s is missing" % name)
            headers[name] = value
        host = self.headers.get("Host", "")
        request = AWSRequest(method=self.command, url="http://%s%s" % (host, self.path), headers=headers, data=body)
        request.context["timestamp"] = amz_date
        signer = S3SigV4Auth(Credentials(key, self.keys[key]), service, region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if day != amz_date[:8] or not hmac.compare_digest(expected, signature):
            return ("SignatureDoesNotMatch",
                    "The request signature we calculated does not match the signature you provided.")
        return None

    def handle_any(self):
        body = self.read_body()
        refusal = self.check(body)
        if refusal:
            self.refuse(*refusal)
            return
        # s3rver has accounts of its own: the request goes on signed anew for
        # its default one (botocore again), the client's signature having held.
        drop = HOP | {"content-length", "authorization", "x-amz-date", "host", "x-amz-content-sha256",
                      "x-amz-security-token"}
        forward = AWSRequest(method=self.command, url="http://127.0.0.1:%d%s" % (self.upstream, self.path),
                             headers={k: v for k, v in self.headers.items() if k.lower() not in drop}, data=body)
        S3SigV4Auth(Credentials("S3RVER", "S3RVER"), "s3", "us-east-1").add_auth(forward)
        headers = dict(forward.headers.items())
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        conn.request(self.command, self.path, body=body if body else None, headers=headers)
        resp = conn.getresponse()
        self.send_response(resp.status, resp.reason)
        length = None
        for k, v in resp.getheaders():
            if k.lower() in HOP:
                continue
            if k.lower() == "content-length":
                length = v
            self.send_header(k, v)
        if length is None and self.command != "HEAD" and resp.status not in (204, 304):
            data = resp.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.end_headers()
            while self.command != "HEAD":
                chunk = resp.read(1 << 16)
                if not chunk:
                    break
                self.wfile.write(chunk)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def main():
    ap = front_server.arguments()
    ap.add_argument("--keys", required=True)
    args = ap.parse_args()
    Front.keys = dict(kv.split(":", 1) for kv in args.keys.split(","))
    Front.upstream = args.upstream
    front_server.serve(args.listen, Front)


if __name__ == "__main__":
    main()
