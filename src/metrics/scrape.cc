#include "metrics/scrape.h"

#include <curl/curl.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

namespace hpct::metrics {
namespace {

size_t append_body(char* p, size_t size, size_t n, void* out) {
  auto* body = static_cast<std::string*>(out);
  if (body->size() > (64u << 20))
    return 0;  // no rank's metrics are this large: refuse, do not grow without end
  body->append(p, size * n);
  return size * n;
}

}  // namespace

std::vector<ScrapeResult> scrape_targets(const std::vector<std::string>& targets,
                                         std::chrono::milliseconds timeout) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::vector<ScrapeResult> results(targets.size());
  std::unique_ptr<CURLM, decltype(&curl_multi_cleanup)> multi(curl_multi_init(),
                                                              curl_multi_cleanup);
  std::vector<CURL*> easy(targets.size(), nullptr);
  std::vector<std::string> urls(targets.size());
  std::vector<std::array<char, CURL_ERROR_SIZE>> errors(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    results[i].target = targets[i];
    urls[i] = "http://" + targets[i] + "/metrics";
    CURL* c = curl_easy_init();
    easy[i] = c;
    curl_easy_setopt(c, CURLOPT_URL, urls[i].c_str());
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");  // the job's own hosts, never through a proxy
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &results[i].body);
    errors[i][0] = '\0';
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errors[i].data());
    curl_easy_setopt(c, CURLOPT_PRIVATE, reinterpret_cast<char*>(i));
    curl_multi_add_handle(multi.get(), c);
  }
  // Each handle has its own CURLOPT_TIMEOUT_MS, so this loop ends within
  // about `timeout`; the count bound is a guard only.
  int running = static_cast<int>(targets.size());
  for (int round = 0; running > 0 && round < 100000; ++round) {
    if (curl_multi_perform(multi.get(), &running) != CURLM_OK) break;
    if (running > 0) curl_multi_poll(multi.get(), nullptr, 0, 100, nullptr);
  }
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi.get(), &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    char* p = nullptr;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &p);
    auto& r = results[reinterpret_cast<size_t>(p)];
    long code = 0;
    curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
    if (m->data.result == CURLE_OK && code == 200) {
      r.ok = true;
    } else if (m->data.result == CURLE_OPERATION_TIMEDOUT) {
      r.timed_out = true;
      char s[64];
      std::snprintf(s, sizeof s, "no answer within %.1f s",
                    static_cast<double>(timeout.count()) / 1000);
      r.error = s;
    } else if (m->data.result != CURLE_OK) {
      const char* detail = errors[reinterpret_cast<size_t>(p)].data();
      r.error = detail[0] != '\0' ? detail : curl_easy_strerror(m->data.result);
      long os_errno = 0;  // curl's text may not say why: "Couldn't connect to server"
      curl_easy_getinfo(m->easy_handle, CURLINFO_OS_ERRNO, &os_errno);
      if (os_errno != 0) r.error += std::string(" (") + std::strerror(static_cast<int>(os_errno)) + ")";
    } else {
      r.error = "HTTP " + std::to_string(code);
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    curl_multi_remove_handle(multi.get(), easy[i]);
    curl_easy_cleanup(easy[i]);
    if (!results[i].ok && results[i].error.empty()) {
      results[i].timed_out = true;
      results[i].error = "no answer";
    }
    if (!results[i].ok) results[i].body.clear();
  }
  return results;
}

}  // namespace hpct::metrics
