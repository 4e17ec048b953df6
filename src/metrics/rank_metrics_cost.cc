// metrics_cost: what a rank's Prometheus endpoint costs the rank, in CPU
// time, without the noise of a training run on a shared machine: one
// record_step (called once per training step) and one scrape as the rank's
// server answers it (the encoder and the socket; the reader's own CPU is
// left out). One JSON line; docs/metrics.md turns it into a share of a
// step. Usage: metrics_cost [STEPS] [SCRAPES]
#include <curl/curl.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "metrics/rank_metrics.h"

namespace {

double cpu(clockid_t which) {
  timespec t{};
  clock_gettime(which, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

size_t append(char* p, size_t s, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, s * n);
  return s * n;
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 1000000;
  const long scrapes = argc > 2 ? std::atol(argv[2]) : 2000;
  hpct::metrics::RankMetrics m(hpct::metrics::RankMetricsOptions{});
  const double t0 = cpu(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < steps; ++i) m.record_step(64, 0.001, 0.01, 0.002, 0.001);
  const double per_step = (cpu(CLOCK_THREAD_CPUTIME_ID) - t0) / static_cast<double>(steps);

  CURL* c = curl_easy_init();
  std::string body;
  const std::string url = m.url();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  double reader = 0;
  const double p0 = cpu(CLOCK_PROCESS_CPUTIME_ID);
  for (long i = 0; i < scrapes; ++i) {
    body.clear();
    const double a = cpu(CLOCK_THREAD_CPUTIME_ID);
    if (curl_easy_perform(c) != CURLE_OK) {
      std::fprintf(stderr, "metrics_cost: GET %s failed\n", url.c_str());
      return 1;
    }
    reader += cpu(CLOCK_THREAD_CPUTIME_ID) - a;
  }
  const double per_scrape = (cpu(CLOCK_PROCESS_CPUTIME_ID) - p0 - reader) / static_cast<double>(scrapes);
  curl_easy_cleanup(c);
  std::printf("{\"bench\":\"metrics_cost\",\"record_step_ns\":%.1f,\"scrape_cpu_us\":%.1f,\"body_bytes\":%zu}\n",
              per_step * 1e9, per_scrape * 1e6, body.size());
  return 0;
}
