"""Real servers for the objstore tests, started on loopback and torn down
by PID: nginx (HTTP, HTTPS with a CA made here, HTTPS with an expired
certificate), s3rver behind the signature-checking front (s3_sigcheck.py),
and the fault proxy (fault_proxy.py). Every wait is bounded."""
import os
import sys
import shutil
import signal
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
S3RVER = os.environ.get("HPCT_S3RVER", "/var/cache/hpctrain/s3rver/node_modules/.bin/s3rver")
AWS = "/usr/bin/aws" if os.path.exists("/usr/bin/aws") else "aws"  # Debian's, not one a user installed with pip
ACCESS_KEY = "HPCTTESTKEY0000000001"
SECRET_KEY = "hpct-test-secret-key-not-for-anything-else"


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
        data = self.root + "/s3rver"
        os.makedirs(data, exist_ok=True)
        self.s3rver_port = free_port()
        p = subprocess.Popen(["node", S3RVER, "-d", data, "-a", "127.0.0.1", "-p", str(self.s3rver_port), "-s"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        wait_port(self.s3rver_port, "s3rver", p)
        self.front_log = open(self.root + "/sigcheck.log", "w")
        p = subprocess.Popen([sys.executable, HERE + "/s3_sigcheck.py", "--upstream", str(self.s3rver_port), "--keys",
                              "%s:%s" % (ACCESS_KEY, SECRET_KEY)], stdout=subprocess.PIPE, stderr=self.front_log)
        self.procs.append(p)
        self.s3_port = read_listening(p, "the signature check")
        self.s3_endpoint = "http://127.0.0.1:%d" % self.s3_port

    def start_proxy(self, upstream, *args):
        p = subprocess.Popen([sys.executable, HERE + "/fault_proxy.py", "--upstream", str(upstream)] + list(args),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        port = read_listening(p, "the fault proxy")
        return port, p

    def aws_env(self, endpoint=None, secret=SECRET_KEY):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("AWS_"):
                del env[k]
        env.update({"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1",
                    "AWS_ENDPOINT_URL": endpoint or self.s3_endpoint, "AWS_CONFIG_FILE": "/dev/null",
                    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_PAGER": ""})
        return env

    def aws(self, *args, endpoint=None):
        """The AWS CLI against the front (its requests are signature-checked too)."""
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
        if getattr(self, "front_log", None):
            self.front_log.close()
