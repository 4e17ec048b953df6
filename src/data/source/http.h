// HTTP(S) requests through libcurl, for shards in web servers and object
// stores: one request (http_perform), a whole object read as a stream that
// survives cut connections and server hiccups (fetch_object), and small
// calls with the same retries (http_call).
//
// s3:// requests are signed by libcurl itself (CURLOPT_AWS_SIGV4); we only
// add the x-amz-content-sha256 header, which curl 7.88 leaves to the caller
// and S3 requires. TLS is verified against the system store or a CA file.
//
// Fault policy (fetch_object, http_call):
//   - a connection cut after some bytes: resumed at once with
//     "Range: bytes=<next byte>-" (counted as a resume);
//   - no answer in time, a refused connection, HTTP 5xx/429/408: retried
//     after a backoff that doubles from `backoff` to `backoff_max` (a retry);
//   - both bounded by `attempts` requests per object, then Io naming the
//     URL, the byte offset and the last reason;
//   - refused credentials or signature (401/403), a TLS certificate that
//     fails verification: Auth at once (exit code 7); no such bucket, key
//     or page (404), a host that does not resolve: Io at once (exit code 5).
//     Each is one line naming the URL and what to fix; none is retried.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "data/source/url.h"

namespace hpct::data {

struct HttpOptions {
  std::string ca_file;    // empty: the system's CA store
  Millis timeout{20000};  // to connect, and the longest gap without a byte
  int attempts = 10;      // requests per object, first one included
  Millis backoff{100};    // first wait before a retry
  Millis backoff_max{3000};
};

// The object (or page) does not exist: HTTP 404, S3's NoSuchKey. An Io
// error; its own type lets a reader that looks for an optional object (a
// shard's sidecar index) tell "absent" from "failed". Never retried.
class NotFoundError : public Error {
 public:
  using Error::Error;
};

// Counters of one source (a host or a bucket). Updated by fetch threads with
// relaxed atomics; read by anyone.
struct SourceCounters {
  std::atomic<std::uint64_t> bytes{0};  // body bytes received
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> retries{0};      // requests repeated after a failure with no bytes
  std::atomic<std::uint64_t> resumes{0};      // range requests after a cut
  std::atomic<std::uint64_t> stalls{0};       // reads that waited for bytes not yet arrived
  std::atomic<std::uint64_t> stall_us{0};     // time spent in those waits
  std::atomic<std::uint64_t> ttfb_us_sum{0};  // time to first byte, summed over objects
  std::atomic<std::uint64_t> ttfb_count{0};
  std::atomic<std::uint64_t> cache_hits{0};  // shards read from the cache, not the server
};

// What a download waits for, sampled every kEvery body bytes: the share of
// the wall time since the last sample that the receiving thread ran. A
// thread that runs most of the time is held back by its CPU (another
// download would only share it); one that mostly sleeps waits for the
// network (on loopback here the fetch thread ran 60-100% of the time, from
// a namespace host behind a 1 Gbit/s link a few percent).
struct DownloadLoad {
  static constexpr std::uint64_t kEvery = 1 << 20;
  static constexpr double kBusyShare = 0.25;
  std::atomic<std::uint64_t> busy{0};     // samples where the thread ran >= kBusyShare
  std::atomic<std::uint64_t> waiting{0};  // samples where it ran less
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;                 // what is requested
  std::string shown;               // what the user wrote (s3://b/k), for messages; empty: url
  const S3Settings* s3 = nullptr;  // sign with SigV4 when set
  std::vector<std::string> headers;
  std::string body;              // sent with PUT and POST
  std::uint64_t range_from = 0;  // > 0: "Range: bytes=<range_from>-"
  std::uint64_t range_end = 0;   // > 0: the range stops before this byte ("...-<range_end - 1>")
  DownloadLoad* load = nullptr;  // sampled while the body arrives, when set
};

struct HttpResult {
  int curl_code = 0;
  std::string curl_error;
  long status = 0;
  std::map<std::string, std::string> headers;  // of the final response, names in lower case
  std::string error_body;                      // a non-2xx answer's body (first 64 KiB)
  std::uint64_t body_bytes = 0;
  std::uint64_t ttfb_us = 0;  // to the first body byte, 0 when none came
};

using BodySink = std::function<bool(const char* data, size_t n)>;  // false: stop the transfer

// One request, no retries. Body bytes of a 2xx answer go to on_body; other
// answers' bodies are kept in error_body. Ends early when *cancel is set.
HttpResult http_perform(const HttpRequest& r, const HttpOptions& o, const BodySink& on_body,
                        const std::atomic<bool>* cancel);

// Reads an object from byte `offset` to its end by the fault policy above.
// on_size gets the object's size once, before any body byte; on_body gets the
// bytes in order, each once. Returns early (no error) when *cancel is set.
// With `end`, the bytes [offset, end) only (the object's end if it is
// shorter).
void fetch_object(const HttpRequest& r, const HttpOptions& o, std::uint64_t offset,
                  SourceCounters* counters, const std::function<void(std::uint64_t)>& on_size,
                  const BodySink& on_body, const std::atomic<bool>* cancel,
                  std::uint64_t end = UINT64_MAX);

// A small request (listing, multipart calls) with the same retries; returns
// the 2xx answer's body, and its headers in *headers when given.
std::string http_call(const HttpRequest& r, const HttpOptions& o, SourceCounters* counters,
                      std::map<std::string, std::string>* headers = nullptr);

// The text of <tag>...</tag> elements in an XML answer, in order (entities
// &amp; &lt; &gt; &quot; &apos; decoded).
std::vector<std::string> xml_values(const std::string& xml, const std::string& tag);

}  // namespace hpct::data
