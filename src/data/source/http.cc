#include "data/source/http.h"

#include <curl/curl.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace hpct::data {
namespace {

constexpr size_t kErrorBodyCap = 64 << 10;

// libcurl's global set-up is not thread-safe; the first request does it once.
void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  const BodySink* on_body = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  CURL* curl = nullptr;
  HttpResult* result = nullptr;
  std::chrono::steady_clock::time_point start;
  const std::string* body = nullptr;
  size_t body_pos = 0;
  bool stopped_by_sink = false;
  DownloadLoad* load = nullptr;
  std::uint64_t next_sample = 0;  // body byte count of the next load sample
  std::int64_t cpu_ns = -1;        // the thread's CPU time at the last sample
  std::int64_t wall_ns = 0;        // and the wall time
  int lowat = 1;                   // the socket's SO_RCVLOWAT as last set
  curl_off_t body_length = -2;     // this answer's Content-Length (-1: none; -2: not looked up)
};

// Once a body is well under way, the fetch thread is woken per
// kBatchedWake bytes instead of per few packets (SO_RCVLOWAT): at a link's
// rate, a thread woken per packet preempts a training rank thousands of
// times a second. Measured 2026-11-27 on the 2-vCPU EPYC, 93 MB across the
// 1 Gbit/s namespace link (`bench data`, curl's share included): 0.40-0.43 s
// of system time against 0.21-0.26 s, involuntary switches 306-399
// against 115-122. The first MiB comes as it arrives (the first samples
// wait for it), and so does the last kTailMargin: the watermark must never
// ask for bytes that will not come (a TLS record read in part, the end).
constexpr std::uint64_t kBatchedWakeAfter = 1 << 20;
constexpr int kBatchedWake = 256 << 10;
constexpr std::int64_t kTailMargin = 64 << 10;

void batch_wakeups(Transfer* t) {
  if (t->result->body_bytes < kBatchedWakeAfter) return;
  if (t->body_length == -2 &&
      curl_easy_getinfo(t->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &t->body_length) != CURLE_OK)
    t->body_length = -1;  // the body's length (a range's), looked up once
  if (t->body_length < 0) return;
  const std::int64_t left =
      static_cast<std::int64_t>(t->body_length) - static_cast<std::int64_t>(t->result->body_bytes);
  const int want = left - kTailMargin >= kBatchedWake ? kBatchedWake : 1;
  if (want == t->lowat) return;
  curl_socket_t fd = CURL_SOCKET_BAD;
  if (curl_easy_getinfo(t->curl, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK || fd == CURL_SOCKET_BAD) return;
  // Best effort: a socket that refuses it wakes per packet, as before.
  ::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want);
  t->lowat = want;
}

std::int64_t clock_ns(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A sample of DownloadLoad (the first of a transfer only starts the clocks).
void sample_load(Transfer* t) {
  const std::int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID), wall = clock_ns(CLOCK_MONOTONIC);
  if (t->cpu_ns >= 0 && wall > t->wall_ns) {
    const bool busy = static_cast<double>(cpu - t->cpu_ns) >=
                      DownloadLoad::kBusyShare * static_cast<double>(wall - t->wall_ns);
    (busy ? t->load->busy : t->load->waiting).fetch_add(1, std::memory_order_relaxed);
  }
  t->cpu_ns = cpu;
  t->wall_ns = wall;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {
    t->result->headers.clear();  // a new response (after 100 Continue or a redirect)
    t->body_length = -2;
  } else {
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      size_t v = line.find_first_not_of(' ', colon + 1);
      t->result->headers[name] = v == std::string::npos ? "" : line.substr(v);
    }
  }
  return size * n;
}

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  t->result->status = status;
  if (status < 200 || status >= 300) {
    auto& b = t->result->error_body;
    if (b.size() < kErrorBodyCap) b.append(data, std::min(bytes, kErrorBodyCap - b.size()));
    return bytes;
  }
  if (t->result->body_bytes == 0 && bytes > 0) {
    t->result->ttfb_us =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::steady_clock::now() - t->start)
                                       .count());
  }
  t->result->body_bytes += bytes;
  batch_wakeups(t);
  if (t->load && t->result->body_bytes >= t->next_sample) {
    t->next_sample = t->result->body_bytes + DownloadLoad::kEvery;
    sample_load(t);
  }
  if (t->on_body && *t->on_body && !(*t->on_body)(data, bytes)) {
    t->stopped_by_sink = true;
    return 0;
  }
  return bytes;
}

size_t on_read(char* buf, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t k = std::min(size * n, t->body->size() - t->body_pos);
  std::copy_n(t->body->data() + t->body_pos, k, buf);
  t->body_pos += k;
  return k;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->cancel && t->cancel->load() ? 1 : 0;
}

std::string shown(const HttpRequest& r) { return r.shown.empty() ? r.url : r.shown; }

std::string first(const std::vector<std::string>& v) { return v.empty() ? "" : v.front(); }

// Throws the one-line error of a failure that retrying cannot mend, or
// returns the reason a retry may.
std::string judge(const HttpResult& res, const HttpRequest& r, const HttpOptions& o) {
  const std::string url = shown(r);
  if (res.curl_code != CURLE_OK && res.status == 0) {
    const std::string why = res.curl_error.empty()
                                ? curl_easy_strerror(static_cast<CURLcode>(res.curl_code))
                                : res.curl_error;
    switch (res.curl_code) {
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_ISSUER_ERROR:
        throw Error(ErrorCode::kAuth,
                    url + ": the server's TLS certificate was refused (" + why +
                        "): renew the server's certificate, or give the CA that signs it "
                        "with --ca-file (HPCT_DATA_CA_FILE)" +
                        (o.ca_file.empty() ? "" : "; now " + o.ca_file));
      case CURLE_COULDNT_RESOLVE_HOST:
        throw Error(ErrorCode::kIo, url + ": " + why + ": check the host name in the URL" +
                                        (r.s3 ? " or AWS_ENDPOINT_URL" : ""));
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
        throw_invalid_argument(url + ": " + why);
      default:
        return why;
    }
  }
  const long s = res.status;
  if (s >= 500 || s == 429 || s == 408) return "HTTP " + std::to_string(s);
  if (res.curl_code != CURLE_OK && s >= 200 && s < 300) {
    return res.curl_error.empty() ? curl_easy_strerror(static_cast<CURLcode>(res.curl_code))
                                  : res.curl_error;
  }
  const std::string code = first(xml_values(res.error_body, "Code"));
  const std::string status = "HTTP " + std::to_string(s) + (code.empty() ? "" : " " + code);
  if (r.s3) {
    if (code == "SignatureDoesNotMatch") {
      throw Error(ErrorCode::kAuth, url + ": the server refused the request's signature (" +
                                        status + "): check the secret key (" +
                                        r.s3->credentials_from + ")");
    }
    if (code == "InvalidAccessKeyId") {
      throw Error(ErrorCode::kAuth, url + ": the server does not know access key " +
                                        r.s3->access_key + " (" + status + "): check " +
                                        r.s3->credentials_from);
    }
    if (code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired") {
      throw Error(ErrorCode::kAuth, url + ": the session token was refused (" + status +
                                        "): get new temporary credentials (AWS_SESSION_TOKEN)");
    }
    if (code == "NoSuchBucket") {
      S3Location loc;
      parse_s3_url(url, &loc);
      throw Error(ErrorCode::kIo, url + ": no bucket '" + loc.bucket + "' at " + r.s3->endpoint +
                                      " (" + status +
                                      "): check the bucket name, AWS_ENDPOINT_URL and AWS_REGION");
    }
    if (code == "NoSuchKey") {
      throw NotFoundError(ErrorCode::kIo, url + ": no such object (" + status +
                                      "): check the key, e.g. with `aws s3 ls` on its prefix");
    }
  }
  if (s == 401 || s == 403) {
    throw Error(
        ErrorCode::kAuth,
        url + ": access refused (" + status + "): " +
            (r.s3 ? "check the credentials (" + r.s3->credentials_from + ") and the bucket's policy"
                  : "the server needs credentials this URL does not carry"));
  }
  if (s == 404) throw NotFoundError(ErrorCode::kIo, url + ": not found (" + status + "): check the URL");
  throw Error(ErrorCode::kIo, url + ": the server answered " + status + ": check the URL");
}

void sleep_unless_cancelled(Millis d, const std::atomic<bool>* cancel) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
    if (cancel && cancel->load()) return;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        Millis(20), end - std::chrono::steady_clock::now()));
  }
}

// "bytes 100-199/1000" -> first 100, total 1000; "bytes */1000" -> total.
bool parse_content_range(const std::string& v, std::uint64_t* first, std::uint64_t* total) {
  const size_t slash = v.find('/');
  if (slash == std::string::npos || v.rfind("bytes ", 0) != 0) return false;
  try {
    *total = std::stoull(v.substr(slash + 1));
    *first = v[6] == '*' ? 0 : std::stoull(v.substr(6));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// One request; *out is filled as the answer arrives, so a sink can read
// the headers when the body starts.
void perform(const HttpRequest& r, const HttpOptions& o, const BodySink& on_body,
             const std::atomic<bool>* cancel, HttpResult* out) {
  global_init();
  HttpResult& res = *out;
  res = HttpResult();
  CURL* c = curl_easy_init();
  if (c == nullptr) throw Error(ErrorCode::kIo, "libcurl could not start a request");
  char errbuf[CURL_ERROR_SIZE] = {0};
  Transfer t;
  t.on_body = &on_body;
  t.cancel = cancel;
  t.curl = c;
  t.result = &res;
  t.body = &r.body;
  t.load = r.load;
  curl_slist* headers = nullptr;
  for (const auto& h : r.headers) headers = curl_slist_append(headers, h.c_str());
  std::string sigv4;
  if (r.s3) {
    // curl signs; S3 wants the payload's hash in a header, and
    // UNSIGNED-PAYLOAD is what TLS-protected clients send (as the AWS CLI).
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!r.s3->session_token.empty()) {
      headers =
          curl_slist_append(headers, ("x-amz-security-token: " + r.s3->session_token).c_str());
    }
    sigv4 = "aws:amz:" + r.s3->region + ":s3";
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERNAME, r.s3->access_key.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, r.s3->secret_key.c_str());
  }
  curl_easy_setopt(c, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L << 10);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.timeout.count()));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>((o.timeout.count() + 999) / 1000)));
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!o.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, o.ca_file.c_str());
  std::string range;
  if (r.range_from > 0 || r.range_end > 0) {
    range = std::to_string(r.range_from) + "-" + (r.range_end > 0 ? std::to_string(r.range_end - 1) : "");
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  }
  if (r.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (r.method == "PUT") {
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &t);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  t.start = std::chrono::steady_clock::now();
  const CURLcode rc = curl_easy_perform(c);
  res.curl_code = rc;
  if (rc != CURLE_OK) res.curl_error = errbuf[0] ? errbuf : curl_easy_strerror(rc);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  res.status = status;
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
}

// An answer's first bytes: does it start where we asked (pos), and is it
// still the same object? The first answer gives the size (on_size); a server
// that ignores Range sends from byte 0 again, *skip bytes to drop. Returns
// why not, or "" when it is.
std::string check_answer(const HttpResult& res, std::uint64_t pos, bool* size_known, std::uint64_t* total,
                         std::uint64_t* skip, const std::function<void(std::uint64_t)>& on_size) {
  std::uint64_t first = 0, size = 0;
  auto cr = res.headers.find("content-range");
  if (res.status == 206 && cr != res.headers.end() &&
      parse_content_range(cr->second, &first, &size)) {
    if (first != pos) {
      return "the server answered from byte " + std::to_string(first) + ", not " + std::to_string(pos);
    }
  } else {
    auto cl = res.headers.find("content-length");
    if (cl == res.headers.end()) return "the answer has no Content-Length";
    size = std::stoull(cl->second);
    *skip = pos;
  }
  if (!*size_known) {
    *size_known = true;
    *total = size;
    on_size(*total);
  } else if (size != *total) {
    return "the object changed while it was read (" + std::to_string(*total) + " bytes, now " +
           std::to_string(size) + ")";
  }
  return "";
}

}  // namespace

HttpResult http_perform(const HttpRequest& r, const HttpOptions& o, const BodySink& on_body,
                        const std::atomic<bool>* cancel) {
  HttpResult res;
  perform(r, o, on_body, cancel, &res);
  return res;
}

void fetch_object(const HttpRequest& base, const HttpOptions& o, std::uint64_t offset,
                  SourceCounters* counters, const std::function<void(std::uint64_t)>& on_size,
                  const BodySink& on_body, const std::atomic<bool>* cancel, std::uint64_t end) {
  HttpRequest r = base;
  std::uint64_t pos = offset;
  bool size_known = false;
  std::uint64_t total = 0;
  Millis backoff = o.backoff;
  bool first_byte_seen = false;
  for (int attempt = 1;; ++attempt) {
    if (cancel && cancel->load()) return;
    r.range_from = pos;
    r.range_end = end == UINT64_MAX ? 0 : end;
    HttpResult res;
    std::uint64_t skip = 0;  // a server that ignores Range sends the object from byte 0 again
    bool checked = false;
    bool sink_refused = false;
    bool reached_end = false;  // a server that sends past `end` is cut there
    std::uint64_t got = 0;
    std::string mismatch;
    BodySink sink = [&](const char* data, size_t n) -> bool {
      if (!checked) {
        // The answer's first bytes: does it start where we asked, and is it
        // still the same object?
        checked = true;
        mismatch = check_answer(res, pos, &size_known, &total, &skip, on_size);
        if (!mismatch.empty()) return false;
      }
      if (skip > 0) {
        const size_t k = static_cast<size_t>(std::min<std::uint64_t>(skip, n));
        skip -= k;
        data += k;
        n -= k;
        if (n == 0) return true;
      }
      if (!first_byte_seen) {
        first_byte_seen = true;
        counters->ttfb_us_sum += res.ttfb_us;
        counters->ttfb_count += 1;
      }
      if (end - pos <= n) {
        n = static_cast<size_t>(end - pos);
        reached_end = true;
      }
      counters->bytes += n;
      pos += n;
      got += n;
      if (n > 0 && !on_body(data, n)) {
        sink_refused = true;
        return false;
      }
      return !reached_end;
    };
    counters->requests += 1;
    perform(r, o, sink, cancel, &res);
    if (cancel && cancel->load()) return;
    if (sink_refused || reached_end) return;  // the reader was closed, or the range is whole
    if (!mismatch.empty()) {
      throw_data_corrupt(shown(r) + ", byte offset " + std::to_string(pos) + ": " + mismatch);
    }
    const bool ok_status = res.status >= 200 && res.status < 300;
    if (res.status == 416 && pos > 0) {
      // Asked past the end: fine when the end is where we are.
      std::uint64_t first = 0, size = 0;
      auto cr = res.headers.find("content-range");
      if (cr != res.headers.end() && parse_content_range(cr->second, &first, &size) && size == pos)
        return;
    }
    if (ok_status && res.curl_code == CURLE_OK) {
      if (!size_known) {
        // No body byte came: an empty object.
        auto cl = res.headers.find("content-length");
        const std::uint64_t size = cl == res.headers.end() ? 0 : std::stoull(cl->second);
        if (size == 0 && pos == 0) {
          on_size(0);
          return;
        }
      } else if (pos == total) {
        return;
      }
    }
    std::string reason =
        res.curl_code == CURLE_OK && ok_status
            ? "the answer ended at byte " + std::to_string(pos) + " of " + std::to_string(total)
            : judge(res, r, o);
    if (attempt >= o.attempts) {
      throw Error(ErrorCode::kIo, shown(r) + ": gave up after " + std::to_string(attempt) +
                                      " requests, at byte offset " + std::to_string(pos) +
                                      (size_known ? " of " + std::to_string(total) : "") + ": " +
                                      reason + " (HPCT_DATA_FETCH_ATTEMPTS bounds the requests)");
    }
    if (got > 0) {
      counters->resumes += 1;  // cut mid-body: go on from the next byte at once
      backoff = o.backoff;
    } else {
      counters->retries += 1;
      sleep_unless_cancelled(backoff, cancel);
      backoff = std::min(o.backoff_max, backoff * 2);
    }
  }
}

std::string http_call(const HttpRequest& r, const HttpOptions& o, SourceCounters* counters,
                      std::map<std::string, std::string>* headers) {
  Millis backoff = o.backoff;
  for (int attempt = 1;; ++attempt) {
    std::string body;
    HttpResult res;
    counters->requests += 1;
    perform(
        r, o,
        [&](const char* d, size_t n) {
          body.append(d, n);
          return true;
        },
        nullptr, &res);
    if (res.curl_code == CURLE_OK && res.status >= 200 && res.status < 300) {
      if (headers) *headers = res.headers;
      return body;
    }
    const std::string reason = judge(res, r, o);
    if (attempt >= o.attempts) {
      throw Error(ErrorCode::kIo, shown(r) + ": gave up after " + std::to_string(attempt) +
                                      " requests: " + reason +
                                      " (HPCT_DATA_FETCH_ATTEMPTS bounds the requests)");
    }
    counters->retries += 1;
    sleep_unless_cancelled(backoff, nullptr);
    backoff = std::min(o.backoff_max, backoff * 2);
  }
}

std::vector<std::string> xml_values(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  size_t at = 0;
  while ((at = xml.find(open, at)) != std::string::npos) {
    const size_t b = at + open.size();
    const size_t e = xml.find(close, b);
    if (e == std::string::npos) break;
    std::string v = xml.substr(b, e - b), d;
    for (size_t i = 0; i < v.size(); ++i) {
      static const std::pair<const char*, char> ents[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool hit = false;
      for (const auto& [name, ch] : ents) {
        if (v.compare(i, std::strlen(name), name) == 0) {
          d.push_back(ch);
          i += std::strlen(name) - 1;
          hit = true;
          break;
        }
      }
      if (!hit) d.push_back(v[i]);
    }
    out.push_back(std::move(d));
    at = e + close.size();
  }
  return out;
}

}  // namespace hpct::data
