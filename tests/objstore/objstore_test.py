#!/usr/bin/env python3
"""Shards in object storage, end to end with real servers on loopback
(label objstore): nginx over HTTP and HTTPS (a CA made by the test),
moto's S3 server checking every request's SigV4 signature itself, the AWS
CLI as a second client, and our fault proxy.

  - the cnn trained from s3:// and from https:// on 2 ranks ends with the
    same parameter CRC as from the same shards on local disk (same seed);
  - through the fault proxy (every shard's first 2 GETs answered 503, the
    next 3 cut at random offsets) the CRC is the same again, and the
    summary counts exactly those retries and resumes;
  - moto itself refuses a wrong secret, an unknown key, an unsigned
    request and a request changed after signing (403), so the refusals
    below are the server's;
  - a wrong secret, a missing bucket, a missing key and an expired
    certificate each end in under 10 s with one line naming the URL, exit
    code 7 (credentials, certificate) or 5 (missing);
  - a shard that keeps failing is skipped or fails the job by
    HPCT_DATA_ON_ERROR, named by its URL;
  - a glob over a bucket lists it; a throttled shard's first sample is read
    long before its last byte arrives; an answer that never comes is retried
    within HPCT_DATA_FETCH_ATTEMPTS, then named;
  - the cache: a second run reads nothing from the server, 3 ranks sharing
    it keep its bound, a download killed midway leaves only a part file;
  - data pack -o s3:// uploads the bytes a local pack writes (the AWS CLI
    reads them back), and an interrupted pack leaves no object behind.
HPCTRAIN names the hpctrain binary; HPCT_TEST_TOOLS_ENV the environment
with moto (scripts/install-deps.sh makes it)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

HPCTRAIN = os.environ.get("HPCTRAIN", "hpctrain")
SHARDS = 4          # training shards of 500 samples; a fifth for validation
WALK = {"HPCT_DATA_SIDECARS": "0"}
BUCKET = "hpct-data"


def run_hpctrain(args, env=None, timeout=240):
    t0 = time.monotonic()
    p = subprocess.run([HPCTRAIN] + args, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def summary_of(out):
    """The last JSON line (under launch, after the "[rank] " prefix)."""
    for line in reversed(out.splitlines()):
        at = line.find("{\"")
        if at >= 0:
            return json.loads(line[at:])
    return None


class ObjectStore(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="hpct-objstore-")
        cls.www = cls.dir + "/www"
        rc, out, err, _ = run_hpctrain(["data", "pack", "--from", "fashion-mnist", "--split", "test", "-q",
                                        "--max-count", "500", "-o", cls.www + "/fm/fm-%06d.tar"])
        assert rc == 0, out + err
        for f in os.listdir(cls.www + "/fm"):
            if int(f[3:9]) > SHARDS:
                os.remove(cls.www + "/fm/" + f)
        cls.srv = servers.Servers(cls.dir, cls.www)
        try:
            cls.srv.start_nginx()
            cls.srv.start_s3()
            # The AWS CLI creates the bucket and uploads the shards, signed
            # with the IAM user's key: a real client's signatures pass moto.
            cls.srv.aws("s3", "mb", "s3://" + BUCKET)
            cls.srv.aws("s3", "cp", "--recursive", "--quiet", cls.www + "/fm", "s3://%s/fm/" % BUCKET)
            # The same shards without their sidecar indexes, as a user who
            # uploads shards made by other tools has them: each is read
            # whole before the epoch is planned, so every rank reads every
            # object once, and with HPCT_DATA_SIDECARS=0 (no lookups: WALK)
            # the exact counts below hold.
            cls.srv.aws("s3", "cp", "--recursive", "--quiet", "--exclude", "*.idx", cls.www + "/fm",
                        "s3://%s/fm-walk/" % BUCKET)
        except Exception:
            cls.srv.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        if not os.environ.get("OBJSTORE_TEST_KEEP"):
            shutil.rmtree(cls.dir, ignore_errors=True)

    def train(self, base, env=None, extra=(), steps=12):
        last = "%06d" % (SHARDS - 1)
        args = ["launch", "-np", "2", "--", HPCTRAIN, "train", "--model", "cnn",
                "--data", "%s/fm-{000000..%s}.tar" % (base, last), "--val", "%s/fm-%06d.tar" % (base, SHARDS),
                "--batch", "32", "--lr", "0.05", "--threads", "1", "--seed", "7",
                "--max-steps", str(steps), "--log-every", "6", "--progress", "lines", "--ca-file", self.srv.ca_file]
        args += list(extra)
        if "--epochs" not in extra:
            args += ["--epochs", "1"]
        env = dict(env or os.environ)
        env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
        rc, out, err, _ = run_hpctrain(args, env=env)
        self.assertEqual(rc, 0, out + err)
        s = summary_of(out)
        self.assertIsNotNone(s, out + err)
        self.assertTrue(s["params_identical_across_ranks"], out)
        return s, out + err

    def local_crc(self):
        if not hasattr(ObjectStore, "_local"):
            s, _ = self.train(self.www + "/fm")
            self.assertNotIn("remote_reads", s)
            ObjectStore._local = s["params_crc32c"]
        return ObjectStore._local

    # Acceptance 1.
    def test_s3_and_https_train_like_local_disk(self):
        local = self.local_crc()
        log_at = self.srv.s3_log_size()
        s3, out = self.train("s3://%s/fm" % BUCKET, env=self.srv.aws_env())
        self.assertEqual(s3["params_crc32c"], local, out)
        self.assertGreater(s3["remote_reads"]["bytes"], 0, out)
        https, out = self.train("https://127.0.0.1:%d/fm" % self.srv.https_port)
        self.assertEqual(https["params_crc32c"], local, out)
        self.assertGreater(https["remote_reads"]["bytes"], 0, out)
        # moto refused nothing: every request hpctrain made carried a good signature.
        self.assertEqual(self.srv.s3_refusals(log_at), [])

    def test_the_server_itself_refuses_bad_signatures(self):
        # Straight to moto, no proxy: the IAM user's key reads a range of a
        # shard and lists a prefix; a wrong secret, an unknown key, no
        # signature, a range or a prefix changed after signing are each
        # refused by moto with 403, and a PUT with a wrong secret stores nothing.
        path = "/%s/fm/fm-000000.tar" % BUCKET
        with open(self.www + "/fm/fm-000000.tar", "rb") as f:
            want = f.read(1024)
        log_at = self.srv.s3_log_size()
        status, body = self.srv.s3_request("GET", path, headers={"Range": "bytes=0-1023"})
        self.assertEqual((status, body), (206, want))
        status, body = self.srv.s3_request("GET", path, secret="wrong")
        self.assertEqual(status, 403, body)
        self.assertIn(b"<Code>SignatureDoesNotMatch</Code>", body)
        status, body = self.srv.s3_request("GET", path, access_key="AKIA" + "Z" * 16)
        self.assertEqual(status, 403, body)
        self.assertIn(b"<Code>InvalidAccessKeyId</Code>", body)
        status, body = self.srv.s3_request("GET", path, signed=False)
        self.assertEqual(status, 403, body)
        self.assertNotIn(want[:512], body)
        status, body = self.srv.s3_request("GET", path, headers={"Range": "bytes=0-1023"},
                                           sent_headers={"Range": "bytes=1024-2047"})
        self.assertEqual(status, 403, body)
        self.assertIn(b"<Code>SignatureDoesNotMatch</Code>", body)
        listing = "/%s?list-type=2&prefix=fm%%2F" % BUCKET  # "/" encoded, as SigV4 signs it
        status, body = self.srv.s3_request("GET", listing)
        self.assertEqual(status, 200, body)
        self.assertIn(b"<Key>fm/fm-000000.tar</Key>", body)
        status, body = self.srv.s3_request("GET", listing, secret="wrong")
        self.assertEqual(status, 403, body)
        status, body = self.srv.s3_request("GET", listing, sent_path=listing.replace("fm%2F", "fm-walk%2F"))
        self.assertEqual(status, 403, body)
        self.assertIn(b"<Code>SignatureDoesNotMatch</Code>", body)
        status, body = self.srv.s3_request("PUT", "/%s/forged/x.tar" % BUCKET, secret="wrong", body=b"forged")
        self.assertEqual(status, 403, body)
        status, body = self.srv.s3_request("GET", "/%s/forged/x.tar" % BUCKET)
        self.assertEqual(status, 404, body)
        self.assertIn(b"<Code>NoSuchKey</Code>", body)
        # moto's log counts the seven refusals: each was the server's own answer.
        self.assertEqual(len(self.srv.s3_refusals(log_at)), 7)

    def test_a_second_epoch_reads_nothing_from_the_server(self):
        # 2 epochs (31 steps each): every rank asks for each shard once, and
        # the bytes are the shards' once per rank.
        s, out = self.train("s3://%s/fm-walk" % BUCKET, env=dict(self.srv.aws_env(), **WALK),
                            extra=["--epochs", "2"], steps=40)
        self.assertEqual(s["steps"], 40, out)
        shards = ["%s/fm/fm-%06d.tar" % (self.www, i) for i in range(SHARDS + 1)]
        self.assertEqual(s["remote_reads"]["requests"], 2 * len(shards), out)
        self.assertEqual(s["remote_reads"]["bytes"], 2 * sum(os.path.getsize(f) for f in shards), out)

    def test_resume_from_a_checkpoint_continues_at_the_same_sample(self):
        # A run from s3:// checkpointed at step 6 and resumed there by a new
        # job ends with the parameters of the uninterrupted run from disk.
        local = self.local_crc()
        ckpt = self.dir + "/ckpt-s3"
        s, out = self.train("s3://%s/fm" % BUCKET, env=self.srv.aws_env(),
                            extra=["--checkpoint-dir", ckpt, "--checkpoint-every", "6"])
        self.assertEqual(s["params_crc32c"], local, out)
        again, out = self.train("s3://%s/fm" % BUCKET, env=self.srv.aws_env(),
                                extra=["--checkpoint-dir", ckpt, "--resume", ckpt + "/ckpt-0000000006.pt"])
        self.assertEqual(again["resumed_from_step"], 6, out)
        self.assertEqual(again["params_crc32c"], local, out)

    # Acceptance 2.
    def test_cut_and_failing_responses_lose_nothing(self):
        local = self.local_crc()
        port, proxy = self.srv.start_proxy(self.srv.s3_port, "--fail", "2", "--cut", "3", "--seed", "5")
        s, out = self.train("s3://%s/fm-walk" % BUCKET, env=dict(self.srv.aws_env("http://127.0.0.1:%d" % port), **WALK))
        self.assertEqual(s["params_crc32c"], local, out)
        shards = SHARDS + 1
        # Each rank reads every shard once (the index walks them all); the
        # proxy counts per shard, so the faults are shared between the ranks.
        self.assertEqual(s["remote_reads"]["retries"], 2 * shards, out)
        self.assertEqual(s["remote_reads"]["resumes"], 3 * shards, out)
        proxy.terminate()
        events = [json.loads(l) for l in proxy.stdout.read().decode().splitlines() if l.startswith("{")]
        self.assertEqual(sum(e["fault"] == "cut" for e in events), 3 * shards)
        self.assertEqual(sum(e["fault"] == "status" for e in events), 2 * shards)

    # Acceptance 3.
    def assert_one_line_error(self, url, env, code, words):
        args = ["train", "--model", "cnn", "--data", url, "--max-steps", "1", "--ca-file", self.srv.ca_file]
        rc, out, err, took = run_hpctrain(args, env=env, timeout=60)
        lines = [l for l in (out + err).splitlines() if l.strip()]
        self.assertEqual(rc, code, out + err)
        self.assertLess(took, 10.0, out + err)
        self.assertEqual(len(lines), 1, out + err)
        self.assertIn(url, lines[0])
        for w in words:
            self.assertIn(w, lines[0])

    def test_bad_credentials_bucket_key_certificate_fail_fast(self):
        good = "s3://%s/fm/fm-000000.tar" % BUCKET
        self.assert_one_line_error(good, self.srv.aws_env(secret="wrong"), 7, ["SignatureDoesNotMatch", "secret key"])
        self.assert_one_line_error("s3://no-such-bucket/fm/fm-000000.tar", self.srv.aws_env(), 5, ["NoSuchBucket"])
        self.assert_one_line_error("s3://%s/fm/fm-999999.tar" % BUCKET, self.srv.aws_env(), 5, ["NoSuchKey"])
        self.assert_one_line_error("https://127.0.0.1:%d/fm/fm-000000.tar" % self.srv.expired_port, None, 7,
                                   ["certificate has expired", "--ca-file"])

    def test_glob_lists_the_bucket_and_inspect_streams(self):
        rc, out, err, _ = run_hpctrain(["data", "inspect", "--json", "s3://%s/fm/fm-*.tar" % BUCKET],
                                       env=self.srv.aws_env())
        self.assertEqual(rc, 0, out + err)
        rows = [json.loads(l) for l in out.splitlines()]
        self.assertEqual([r["shard"] for r in rows], ["s3://%s/fm/fm-%06d.tar" % (BUCKET, i) for i in range(SHARDS + 1)])
        self.assertEqual([r["samples"] for r in rows], [500] * (SHARDS + 1))
        # The same through plain HTTP, verified (every image decodes).
        rc, out, err, _ = run_hpctrain(["data", "verify", "http://127.0.0.1:%d/fm/fm-{000000..000001}.tar"
                                        % self.srv.http_port])
        self.assertEqual(rc, 0, out + err)
        self.assertIn("OK 2 shards", out)


    def test_first_sample_is_read_before_the_shard_has_arrived(self):
        # A shard throttled to 1 MB/s takes about a second on the wire; its
        # first sample is read and decoded in a small part of that.
        port, _ = self.srv.start_proxy(self.srv.http_port, "--rate", "1000000")
        rc, out, err, _ = run_hpctrain(["bench", "data", "--rounds", "1", "--source",
                                        "http://127.0.0.1:%d/fm/fm-000002.tar" % port])
        self.assertEqual(rc, 0, out + err)
        r = summary_of(out)
        whole_s = r["bytes"] / r["bytes_per_s"]
        self.assertGreater(whole_s, 0.8, out)
        self.assertLess(r["first_sample_s"], 0.2 * whole_s, out)
        self.assertGreater(r["ratio_to_curl"], 0.8, out)  # both wait for the same wire
        self.assertGreater(list(r["sources"].values())[0]["stalls"], 0, out)  # the reader waited for bytes

    def test_no_answer_is_retried_within_the_bound(self):
        # Every answer waits 3 s; a request may go 1 s without a byte, and a
        # shard gets 2 requests: the read fails in a few seconds, naming why.
        port, _ = self.srv.start_proxy(self.srv.http_port, "--delay", "3")
        env = dict(os.environ, HPCT_DATA_FETCH_TIMEOUT_S="1", HPCT_DATA_FETCH_ATTEMPTS="2")
        url = "http://127.0.0.1:%d/fm/fm-000000.tar" % port
        rc, out, err, took = run_hpctrain(["data", "inspect", url], env=env, timeout=60)
        self.assertEqual(rc, 5, out + err)
        self.assertLess(took, 10.0, out + err)
        self.assertIn(url + ": gave up after 2 requests", err)
        self.assertIn("HPCT_DATA_FETCH_ATTEMPTS", err)

    def test_a_shard_that_keeps_failing_follows_the_on_error_policy(self):
        # Three shards straight from nginx, the fourth behind a proxy that
        # answers every request with 500: skip trains on the three and names
        # the fourth; fail stops the job naming it (exit 5).
        port, _ = self.srv.start_proxy(self.srv.http_port, "--fail", "1000", "--fail-status", "500")
        bad = "http://127.0.0.1:%d/fm/fm-000003.tar" % port
        common = ["train", "--model", "cnn", "--data", "http://127.0.0.1:%d/fm/fm-{000000..000002}.tar"
                  % self.srv.http_port, bad, "--batch", "32", "--max-steps", "3", "--threads", "1"]
        env = dict(os.environ, HPCT_DATA_FETCH_ATTEMPTS="2", OMP_NUM_THREADS="1")
        rc, out, err, _ = run_hpctrain(common, env=dict(env, HPCT_DATA_ON_ERROR="skip"), timeout=120)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("skipping a shard that cannot be read: " + bad + ": gave up after 2 requests", err)
        self.assertIn("HTTP 500", err)
        self.assertEqual(summary_of(out)["steps"], 3, out)
        rc, out, err, took = run_hpctrain(common, env=dict(env, HPCT_DATA_ON_ERROR="fail"), timeout=120)
        self.assertEqual(rc, 5, out + err)
        self.assertIn(bad + ": gave up after 2 requests, at byte offset 0: HTTP 500", err)

    # Sidecar indexes (<shard>.idx, written by data pack and data index): the
    # epoch is planned from them, so the shards stream as they are read.
    def test_sidecars_let_training_start_before_the_shards_arrive(self):
        # One process, one download at a time, every object at 800 kB/s: with
        # sidecars a step needs the bytes up to its first batch; without them
        # every shard is read whole before the first step.
        port, _ = self.srv.start_proxy(self.srv.s3_port, "--rate", "800000")
        env = dict(self.srv.aws_env("http://127.0.0.1:%d" % port), HPCT_DATA_FETCHES="1", OMP_NUM_THREADS="1")
        total = sum(os.path.getsize("%s/fm/fm-%06d.tar" % (self.www, i)) for i in range(SHARDS))

        def one_step(prefix):
            args = ["train", "--model", "cnn", "--data",
                    "s3://%s/%s/fm-{000000..%06d}.tar" % (BUCKET, prefix, SHARDS - 1),
                    "--batch", "32", "--max-steps", "1", "--threads", "1", "--seed", "7"]
            rc, out, err, _ = run_hpctrain(args, env=env, timeout=120)
            self.assertEqual(rc, 0, out + err)
            return summary_of(out)["remote_reads"], out + err

        walked, out = one_step("fm-walk")
        self.assertGreaterEqual(walked["bytes"], total, out)
        self.assertIn("read whole before the epoch starts, for want of one (`hpctrain data index", out)
        streamed, out = one_step("fm")
        self.assertLess(streamed["bytes"], 0.75 * total, out)
        self.assertNotIn("for want of one", out)

    def test_ranks_fetch_only_the_bytes_they_read(self):
        # Two ranks over one epoch from nginx (which answers byte ranges):
        # each rank fetches the bytes of its own part of the epoch, so the
        # two together fetch the shards about once (each its sidecars, and
        # its probe's first samples), not twice; the parameters are those of
        # the same epoch from local disk.
        shards = ["%s/fm/fm-%06d.tar" % (self.www, i) for i in range(SHARDS)]
        total = sum(os.path.getsize(f) for f in shards)
        val = "%s/fm/fm-%06d.tar" % (self.www, SHARDS)  # --val: the ranks split it too
        sidecars = sum(os.path.getsize(f + ".idx") for f in shards + [val])
        steps = SHARDS * 500 // 64
        local, out = self.train(self.www + "/fm", steps=steps)
        https, out = self.train("https://127.0.0.1:%d/fm" % self.srv.https_port, steps=steps)
        self.assertEqual(https["params_crc32c"], local["params_crc32c"], out)
        whole = total + os.path.getsize(val)
        self.assertGreaterEqual(https["remote_reads"]["bytes"], whole, out)
        # Beyond the shards once: the sidecars twice and each rank's probe
        # (up to 65 samples of the first shard, Loader::peek); whole shards
        # per rank would be twice the shards.
        self.assertLess(https["remote_reads"]["bytes"], 1.25 * whole + 2 * sidecars, out)

    def test_sidecars_with_faults_lose_nothing(self):
        # The proxy answers every object's first 2 GETs with 503 and cuts the
        # next 3, sidecars included: the same parameters as from local disk.
        local = self.local_crc()
        port, _ = self.srv.start_proxy(self.srv.s3_port, "--fail", "2", "--cut", "3", "--seed", "9")
        s, out = self.train("s3://%s/fm" % BUCKET, env=self.srv.aws_env("http://127.0.0.1:%d" % port))
        self.assertEqual(s["params_crc32c"], local, out)
        self.assertGreater(s["remote_reads"]["retries"], 0, out)
        self.assertGreater(s["remote_reads"]["resumes"], 0, out)

    def test_a_stale_sidecar_is_named_not_read(self):
        # Shard 0 under shard 1's sidecar (another size), and shard 2 with a
        # sidecar whose first member was renamed (the same size): each read
        # stops with the shard, the member and the command that remakes it.
        d = self.dir + "/stale"
        os.makedirs(d, exist_ok=True)
        fm = self.www + "/fm/"
        shutil.copy(fm + "fm-000000.tar", d)
        shutil.copy(fm + "fm-000001.tar.idx", d + "/fm-000000.tar.idx")
        shutil.copy(fm + "fm-000002.tar", d)
        with open(fm + "fm-000002.tar.idx") as f:
            lines = f.read().split("\n")
        offsets, name = lines[1].rsplit(" ", 1)[0], lines[1].rsplit(" ", 1)[1]
        lines[1] = offsets + " " + "9" + name[1:]
        with open(d + "/fm-000002.tar.idx", "w") as f:
            f.write("\n".join(lines))
        self.srv.aws("s3", "cp", "--recursive", "--quiet", d, "s3://%s/fm-stale/" % BUCKET)
        for shard, words in (("fm-000000.tar", ["bytes, but its sidecar"]),
                             ("fm-000002.tar", ["member #0", "does not match its sidecar index"])):
            url = "s3://%s/fm-stale/%s" % (BUCKET, shard)
            args = ["train", "--model", "cnn", "--data", url, "--max-steps", "2", "--batch", "8", "--threads", "1"]
            rc, out, err, took = run_hpctrain(args, env=dict(self.srv.aws_env(), OMP_NUM_THREADS="1"), timeout=60)
            self.assertNotEqual(rc, 0, out + err)
            self.assertLess(took, 30.0, out + err)
            for w in words + [url, "hpctrain data index " + url]:
                self.assertIn(w, err, out + err)

    def test_data_index_writes_the_sidecars_pack_writes(self):
        # Shards uploaded without sidecars get them from `data index`, byte
        # for byte what `data pack` wrote; a glob lists shards, not sidecars.
        self.srv.aws("s3", "cp", "--recursive", "--quiet", "--exclude", "*.idx", self.www + "/fm",
                     "s3://%s/fm-idx/" % BUCKET)
        rc, out, err, _ = run_hpctrain(["data", "index", "s3://%s/fm-idx/fm-*.tar" % BUCKET], env=self.srv.aws_env())
        self.assertEqual(rc, 0, out + err)
        self.assertIn("indexed %d shards" % (SHARDS + 1), out)
        back = self.dir + "/idx-back"
        self.srv.aws("s3", "cp", "--recursive", "--quiet", "--exclude", "*", "--include", "*.idx",
                     "s3://%s/fm-idx/" % BUCKET, back)
        self.assertEqual(sorted(os.listdir(back)), ["fm-%06d.tar.idx" % i for i in range(SHARDS + 1)])
        for f in os.listdir(back):
            with open(back + "/" + f, "rb") as a, open(self.www + "/fm/" + f, "rb") as b:
                self.assertEqual(a.read(), b.read(), f)
        rc, out, err, _ = run_hpctrain(["data", "inspect", "--json", "s3://%s/fm-idx/fm-*" % BUCKET],
                                       env=self.srv.aws_env())
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(len(out.splitlines()), SHARDS + 1, out)

    # The cache (--cache-dir): whole shards only, shared by the ranks of a
    # host, a second run reads nothing from the server, the bound holds.
    def cache_files(self, cache):
        return sorted(f for f in os.listdir(cache) if not f.startswith("."))

    def test_cache_serves_a_second_run_and_keeps_its_bound(self):
        local = self.local_crc()
        cache = self.dir + "/cache-a"
        shards = SHARDS + 1
        first, out = self.train("s3://%s/fm-walk" % BUCKET, env=dict(self.srv.aws_env(), **WALK),
                                extra=["--cache-dir", cache])
        self.assertEqual(first["params_crc32c"], local, out)
        # One rank downloads each shard while the other waits on its lock.
        self.assertEqual(first["remote_reads"]["cache_hits"], shards, out)
        self.assertEqual(len(self.cache_files(cache)), shards)
        for f in self.cache_files(cache):
            with open(cache + "/" + f, "rb") as a, open(self.www + "/fm/" + f[17:], "rb") as b:
                self.assertEqual(a.read(), b.read(), f)
        again, out = self.train("s3://%s/fm-walk" % BUCKET, env=dict(self.srv.aws_env(), **WALK),
                                extra=["--cache-dir", cache])
        self.assertEqual(again["params_crc32c"], local, out)
        self.assertEqual(again["remote_reads"]["bytes"], 0, out)
        self.assertEqual(again["remote_reads"]["requests"], 0, out)
        self.assertEqual(again["remote_reads"]["cache_hits"], 2 * shards, out)

        # 3 ranks sharing a cache that holds 2.5 shards: it never holds more.
        small = self.dir + "/cache-b"
        bound = int(2.5 * os.path.getsize(self.www + "/fm/fm-000000.tar"))
        args = ["launch", "-np", "3", "--", HPCTRAIN, "train", "--model", "cnn", "--data",
                "s3://%s/fm-walk/fm-{000000..%06d}.tar" % (BUCKET, SHARDS), "--batch", "16", "--max-steps", "2",
                "--threads", "1", "--cache-dir", small, "--cache-size", str(bound)]
        rc, out, err, _ = run_hpctrain(args, env=dict(self.srv.aws_env(), OMP_NUM_THREADS="1", **WALK))
        self.assertEqual(rc, 0, out + err)
        kept = self.cache_files(small)
        self.assertLessEqual(sum(os.path.getsize(small + "/" + f) for f in kept), bound, kept)
        self.assertEqual(len(kept), 2, kept)
        self.assertFalse([f for f in kept if ".part-" in f], kept)

    def test_a_crash_mid_download_leaves_nothing_used(self):
        cache = self.dir + "/cache-c"
        port, _ = self.srv.start_proxy(self.srv.http_port, "--rate", "200000")
        slow = "http://127.0.0.1:%d/fm/fm-000001.tar" % port
        p = subprocess.Popen([HPCTRAIN, "data", "inspect", "--cache-dir", cache, slow],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (os.path.isdir(cache) and
                                                   any(".part-" in f for f in os.listdir(cache))):
            time.sleep(0.05)
        time.sleep(0.5)
        p.kill()
        p.wait(timeout=10)
        left = self.cache_files(cache)
        self.assertEqual(len(left), 1, left)
        self.assertIn(".part-%d-" % p.pid, left[0])  # only a part, under a name nothing reads
        # A later run downloads the shard whole (the same URL) and removes the dead part.
        rc, out, err, _ = run_hpctrain(["data", "verify", "--cache-dir", cache, slow], timeout=60)
        self.assertEqual(rc, 0, out + err)
        left = self.cache_files(cache)
        self.assertEqual(len(left), 1, left)
        self.assertTrue(left[0].endswith("-fm-000001.tar"), left)
        with open(cache + "/" + left[0], "rb") as a, open(self.www + "/fm/fm-000001.tar", "rb") as b:
            self.assertEqual(a.read(), b.read())

    # Uploads: data pack -o s3://... as multipart uploads.
    def test_pack_uploads_what_a_local_pack_writes(self):
        local = self.dir + "/packed-local"
        pack = ["data", "pack", "--from", "fashion-mnist", "--split", "test", "-q", "--max-count", "4000"]
        rc, out, err, _ = run_hpctrain(pack + ["-o", local + "/fm-%06d.tar"])
        self.assertEqual(rc, 0, out + err)
        rc, out, err, _ = run_hpctrain(pack + ["-o", "s3://%s/packed/fm-%%06d.tar" % BUCKET], env=self.srv.aws_env())
        self.assertEqual(rc, 0, out + err)
        back = self.dir + "/packed-back"
        self.srv.aws("s3", "cp", "--recursive", "--quiet", "s3://%s/packed/" % BUCKET, back)
        self.assertEqual(sorted(os.listdir(back)), sorted(os.listdir(local)))
        for f in os.listdir(local):
            with open(local + "/" + f, "rb") as a, open(back + "/" + f, "rb") as b:
                self.assertEqual(a.read(), b.read(), f)

        # Interrupted while uploading (every answer slowed to 0.3 s, so a
        # shard takes a while): no object appears for the shard being written.
        port, _ = self.srv.start_proxy(self.srv.s3_port, "--delay", "0.3")
        p = subprocess.Popen([HPCTRAIN] + pack + ["-o", "s3://%s/cut/fm-%%06d.tar" % BUCKET],
                             env=self.srv.aws_env("http://127.0.0.1:%d" % port),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        time.sleep(1.5)
        p.terminate()
        out = p.communicate(timeout=30)[0].decode()
        self.assertNotEqual(p.returncode, 0, out)
        self.assertIn("interrupted", out)
        listing = self.srv.aws("s3api", "list-objects-v2", "--bucket", BUCKET, "--prefix", "cut/").stdout.decode()
        names = [o["Key"] for o in json.loads(listing).get("Contents", [])] if listing.strip() else []
        self.assertLess(len(names), 3, names)
        for key in names:  # whatever was completed is whole
            got = self.dir + "/cut-" + key.replace("/", "_")
            self.srv.aws("s3", "cp", "--quiet", "s3://%s/%s" % (BUCKET, key), got)
            with open(got, "rb") as a, open(local + "/" + key.split("/")[-1], "rb") as b:
                self.assertEqual(a.read(), b.read(), key)


if __name__ == "__main__":
    unittest.main(verbosity=2)
