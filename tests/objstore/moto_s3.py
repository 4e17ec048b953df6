"""moto's server (moto_server's own main and options), run by the python of
the test tools' environment, with one fix to how it checks S3 signatures.

moto checks a request's SigV4 signature over its URL as werkzeug rebuilds
it, and werkzeug (2.3 and later) decodes the query on the way: a client
signs "prefix=fm%2F" as SigV4 asks, moto recomputes over "prefix=fm/", and
every listing of a prefix with a "/" is refused with SignatureDoesNotMatch
(getmoto/moto#5948; the AWS CLI's `aws s3 ls s3://b/p/` is refused the
same way). Here the check sees the query exactly as it came on the request
line. The signature is still computed and compared by moto (botocore's
S3SigV4Auth, with the secret of the access key moto's IAM holds), and
nothing else about the check changes.

  $HPCT_TEST_TOOLS_ENV/bin/python3 moto_s3.py -H 127.0.0.1 -p PORT
"""
from urllib.parse import urlsplit, urlunsplit

from moto.core.authorization import ActionAuthenticatorMixin
from moto.server import main

_check = ActionAuthenticatorMixin._authenticate_and_authorize_action


def _check_the_query_as_sent(self, iam_request_cls, resource="*"):
    environ = getattr(getattr(self, "request", None), "environ", None) or {}
    raw = environ.get("RAW_URI") or ""
    if "?" not in raw:
        return _check(self, iam_request_cls, resource)
    rebuilt = self.uri
    self.uri = urlunsplit(urlsplit(rebuilt)._replace(query=raw.split("?", 1)[1]))
    try:
        return _check(self, iam_request_cls, resource)
    finally:
        self.uri = rebuilt


ActionAuthenticatorMixin._authenticate_and_authorize_action = _check_the_query_as_sent

if __name__ == "__main__":
    main()
