"""Real servers for the objstore tests, started on loopback and torn down
by PID: nginx (HTTP, HTTPS with a CA made here, HTTPS with an expired
certificate), moto's S3 server with its signature checking on (moto_s3.py),
and the fault proxy (fault_proxy.py). Every wait is bounded."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The environment scripts/install-deps.sh builds for the test servers (moto);
# tests/CMakeLists.txt passes its HPCT_TEST_TOOLS_ENV. Taken out of the
# environment the tests' children inherit: hpctrain warns about an HPCT_
# variable it does not know, and the tests count its output's lines.
TOOLS_ENV = os.environ.pop("HPCT_TEST_TOOLS_ENV", "/var/cache/hpctrain/test-tools-1")
AWS = "/usr/bin/aws" if os.path.exists("/usr/bin/aws") else "aws"  # Debian's, not one a user installed with pip
REGION = "us-east-1"
S3_USER = "hpct-test"
# moto lets this many requests through unchecked: exactly the IAM calls of
# start_s3 that make the user, its key and its policy; every later request
# must carry a valid SigV4 signature by a key moto knows.
IAM_SETUP_ACTIONS = 3
# A request line in werkzeug's log: '"GET /b/k HTTP/1.1" 206 -' (colour codes around the quoted part).
LOG_STATUS = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/[0-9.]+(?:\x1b\[[0-9;]*m)*" (\d{3}) ')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, proc=None, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s exited with %s before listening on %d" % (what, proc.returncode, port))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on port %d within %d s" % (what, port, timeout))


def read_listening(proc, what, timeout=15):
    """The port from a child's first line, "listening on PORT"."""
    deadline = time.monotonic() + timeout
    line = b""
    os.set_blocking(proc.stdout.fileno(), False)
    while time.monotonic() < deadline:
        chunk = proc.stdout.readline()
        if chunk:
            line += chunk
            if line.endswith(b"\n"):
                os.set_blocking(proc.stdout.fileno(), True)
                return int(line.split()[-1])
        elif proc.poll() is not None:
            break
        else:
            time.sleep(0.05)
    raise RuntimeError("%s did not start within %d s (said %r)" % (what, timeout, line))


def run(cmd, **kw):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60, **kw)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 signed by it, and an expired one."""
    os.makedirs(d, exist_ok=True)
    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/ca.key", "-out",
         d + "/ca.pem", "-days", "2", "-subj", "/CN=hpctrain test CA"])
    with open(d + "/ca.cnf", "w") as f:
        f.write("[ca]\ndefault_ca=test\n[test]\ndatabase=%s/index.txt\nnew_certs_dir=%s\nserial=%s/serial\n"
                "default_md=sha256\npolicy=any\ncopy_extensions=copy\nunique_subject=no\n[any]\ncommonName=supplied\n"
                % (d, d, d))
    open(d + "/index.txt", "w").close()
    with open(d + "/serial", "w") as f:
        f.write("01\n")
    for name, dates in (("server", ["-days", "2"]),
                        ("expired", ["-startdate", "20200101000000Z", "-enddate", "20200201000000Z"])):
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "%s/%s.key" % (d, name), "-out",
             "%s/%s.csr" % (d, name), "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"])
        run(["openssl", "ca", "-batch", "-config", d + "/ca.cnf", "-cert", d + "/ca.pem", "-keyfile",
             d + "/ca.key", "-in", "%s/%s.csr" % (d, name), "-out", "%s/%s.pem" % (d, name)] + dates)


class Servers:
    def __init__(self, root, www):
        self.root = root
        self.www = www
        self.procs = []

    def start_nginx(self):
        pki = self.root + "/pki"
        make_pki(pki)
        self.http_port, self.https_port, self.expired_port = free_port(), free_port(), free_port()
        conf = self.root + "/nginx.conf"
        with open(conf, "w") as f:
            f.write("""
daemon off;
user root;
worker_processes 1;
pid %(r)s/nginx.pid;
error_log %(r)s/nginx-error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %(r)s/nginx-tmp; proxy_temp_path %(r)s/nginx-tmp;
  fastcgi_temp_path %(r)s/nginx-tmp; uwsgi_temp_path %(r)s/nginx-tmp; scgi_temp_path %(r)s/nginx-tmp;
  sendfile on;
  server { listen 127.0.0.1:%(http)d; root %(www)s; }
  server { listen 127.0.0.1:%(https)d ssl; root %(www)s;
           ssl_certificate %(pki)s/server.pem; ssl_certificate_key %(pki)s/server.key; }
  server { listen 127.0.0.1:%(expired)d ssl; root %(www)s;
           ssl_certificate %(pki)s/expired.pem; ssl_certificate_key %(pki)s/expired.key; }
}
""" % {"r": self.root, "www": self.www, "pki": pki, "http": self.http_port, "https": self.https_port,
            "expired": self.expired_port})
        os.makedirs(self.root + "/nginx-tmp", exist_ok=True)
        p = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", conf, "-p", self.root], stderr=subprocess.DEVNULL)
        self.procs.append(p)
        for port in (self.http_port, self.https_port, self.expired_port):
            wait_port(port, "nginx", p)
        self.ca_file = pki + "/ca.pem"

    def start_s3(self):
        """moto's S3 server on 127.0.0.1, which checks every request's SigV4
        signature itself (INITIAL_NO_AUTH_ACTION_COUNT): an IAM user with an
        access key and an s3:* policy is made through moto's IAM API, and
        the server is shown to refuse a wrong secret before any test runs."""
        python = os.path.join(TOOLS_ENV, "bin", "python3")
        server = os.path.join(TOOLS_ENV, "bin", "moto_server")
        if not os.access(server, os.X_OK) or not os.path.exists(os.path.join(TOOLS_ENV, ".hpct-ready")):
            raise RuntimeError("moto's S3 server is not installed: no %s (or %s/.hpct-ready is missing: a half-built "
                               "environment); run scripts/install-deps.sh (as root) to install it, or point "
                               "HPCT_TEST_TOOLS_ENV (cmake -DHPCT_TEST_TOOLS_ENV=...) at the environment that has it"
                               % (server, TOOLS_ENV))
        try:
            import botocore  # noqa: F401  (Debian's python3-botocore signs the setup and the raw requests)
        except ImportError:
            raise RuntimeError("botocore is missing from %s: run scripts/install-deps.sh (Debian's python3-botocore)"
                               % sys.executable) from None
        self.s3_port = free_port()
        self.s3_endpoint = "http://127.0.0.1:%d" % self.s3_port
        self.s3_log = self.root + "/moto.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_", "TEST_SERVER_MODE"))}
        env.update({"INITIAL_NO_AUTH_ACTION_COUNT": str(IAM_SETUP_ACTIONS), "PYTHONUNBUFFERED": "1"})
        with open(self.s3_log, "w") as log:
            p = subprocess.Popen([python, HERE + "/moto_s3.py", "-H", "127.0.0.1", "-p", str(self.s3_port)], env=env,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        wait_port(self.s3_port, "moto's server (log: %s)" % self.s3_log, p, timeout=60)
        self.access_key, self.secret_key = self._make_s3_user()
        status, body = self.s3_request("GET", "/", secret="not-" + self.secret_key)
        if status != 403 or b"<Code>SignatureDoesNotMatch</Code>" not in body:
            raise RuntimeError("moto answered %d to a request signed with a wrong secret (%r): its signature "
                               "checking is off; see %s" % (status, body[:200], self.s3_log))

    def _make_s3_user(self):
        """The IAM user, key and policy, through moto's IAM API: the only
        requests moto takes unsigned (IAM_SETUP_ACTIONS of them)."""
        import botocore.config
        import botocore.session
        iam = botocore.session.get_session().create_client(
            "iam", endpoint_url=self.s3_endpoint, region_name=REGION, aws_access_key_id="setup",
            aws_secret_access_key="setup",
            # One attempt each: a retry would spend a request of the unchecked count.
            config=botocore.config.Config(connect_timeout=10, read_timeout=30, retries={"total_max_attempts": 1}))
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.create_user(UserName=S3_USER)
        key = iam.create_access_key(UserName=S3_USER)["AccessKey"]
        iam.put_user_policy(UserName=S3_USER, PolicyName="s3-all", PolicyDocument=json.dumps(policy))
        return key["AccessKeyId"], key["SecretAccessKey"]

    def s3_request(self, method, path, secret=None, access_key=None, headers=None, body=b"", signed=True,
                   sent_headers=None, sent_path=None):
        """One request straight to moto, signed with botocore's S3 signer
        (by default with the user's key; over http it signs the payload's
        SHA-256 too), unsigned when signed is False;
        sent_headers and sent_path replace what was signed. Returns (status, body)."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        headers = dict(headers or {})
        if signed:
            req = AWSRequest(method=method, url=self.s3_endpoint + path, data=body, headers=headers)
            S3SigV4Auth(Credentials(access_key or self.access_key, secret or self.secret_key), "s3",
                        REGION).add_auth(req)
            headers = dict(req.headers.items())
        headers.update(sent_headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.s3_port, timeout=30)
        try:
            conn.request(method, sent_path or path, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def s3_log_size(self):
        return os.path.getsize(self.s3_log)

    def s3_refusals(self, since=0):
        """The requests moto refused (400, 401, 403) as its log shows them, after byte offset since."""
        with open(self.s3_log, errors="replace") as f:
            f.seek(since)
            return [l.strip() for l in f if (m := LOG_STATUS.search(l)) and m.group(3) in ("400", "401", "403")]

    def start_proxy(self, upstream, *args):
        p = subprocess.Popen([sys.executable, HERE + "/fault_proxy.py", "--upstream", str(upstream)] + list(args),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        port = read_listening(p, "the fault proxy")
        return port, p

    def aws_env(self, endpoint=None, secret=None):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("AWS_"):
                del env[k]
        env.update({"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": secret or self.secret_key,
                    "AWS_REGION": REGION,
                    "AWS_ENDPOINT_URL": endpoint or self.s3_endpoint, "AWS_CONFIG_FILE": "/dev/null",
                    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_PAGER": ""})
        return env

    def aws(self, *args, endpoint=None):
        """The AWS CLI against moto (which checks its signatures too)."""
        return subprocess.run([AWS, "--endpoint-url", endpoint or self.s3_endpoint] + list(args),
                              env=self.aws_env(endpoint), check=True, capture_output=True, timeout=120)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
            if p.stdout:
                p.stdout.close()
        self.procs = []
