#include "metrics/rank_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "comm/communicator.h"
#include "comm/connect.h"
#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fd.h"
#include "core/world.h"
#include "engine/engine.h"
#include "metrics/process_stats.h"
#include "net/socket.h"

namespace hpct::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Step times from 1 ms to about 65 s, doubling.
prometheus::Histogram::BucketBoundaries step_buckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double s = 0.001; s < 70; s *= 2) b.push_back(s);
  return b;
}

// The families read at scrape time from the engine, the communicator and /proc.
class ScrapeTimeFamilies : public prometheus::Collectable {
 public:
  ScrapeTimeFamilies(std::vector<ClientMetric::Label> labels, int restarts,
                     const engine::Engine* engine, const comm::Communicator* comm,
                     std::function<std::vector<DataSourceTotals>()> data_sources)
      : labels_(std::move(labels)), restarts_(restarts), engine_(engine), comm_(comm),
        data_sources_(std::move(data_sources)) {}

  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out;
    if (comm_ != nullptr) {
      MetricFamily calls = family("hpctrain_allreduce_calls_total",
                                  "Allreduces by the path that carried them", MetricType::Counter);
      MetricFamily bytes = family("hpctrain_allreduce_bytes_total",
                                  "Bytes allreduced by path (the tensors' bytes as sent)", MetricType::Counter);
      MetricFamily secs = family("hpctrain_allreduce_seconds_total",
                                 "Time spent in allreduces by path", MetricType::Counter);
      for (const auto& [path, t] : comm_->allreduce_paths()) {
        calls.metric.push_back(counter(static_cast<double>(t.calls), {"path", path}));
        bytes.metric.push_back(counter(static_cast<double>(t.bytes), {"path", path}));
        secs.metric.push_back(counter(t.seconds, {"path", path}));
      }
      out.push_back(std::move(calls));
      out.push_back(std::move(bytes));
      out.push_back(std::move(secs));
    }
    if (engine_ != nullptr) {
      const auto s = engine_->stats();
      MetricFamily ratio = family("hpctrain_compression_ratio",
                                  "Allreduced tensor bytes per byte on the wire (1: uncompressed)",
                                  MetricType::Gauge);
      ClientMetric m = base();
      m.gauge.value = s.allreduce_wire_bytes == 0
                          ? 1.0
                          : static_cast<double>(s.allreduce_tensor_bytes) /
                                static_cast<double>(s.allreduce_wire_bytes);
      ratio.metric.push_back(m);
      out.push_back(std::move(ratio));
      MetricFamily stalls = family("hpctrain_stall_warnings_total",
                                   "Stall warnings: tensors some ranks submitted and others not",
                                   MetricType::Counter);
      stalls.metric.push_back(counter(static_cast<double>(s.stall_warnings)));
      out.push_back(std::move(stalls));
      MetricFamily scattered = family("hpctrain_reduce_scatter_bytes_total",
                                      "Bytes reduce-scattered (sharding stage 2's gradients): the tensors' bytes",
                                      MetricType::Counter);
      scattered.metric.push_back(counter(static_cast<double>(s.reduce_scatter_tensor_bytes)));
      out.push_back(std::move(scattered));
      MetricFamily sent = family("hpctrain_reduce_scatter_sent_bytes_total",
                                 "Bytes this rank sent in reduce-scatters: the other ranks' ranges, as sent",
                                 MetricType::Counter);
      sent.metric.push_back(counter(static_cast<double>(s.reduce_scatter_sent_bytes)));
      out.push_back(std::move(sent));
      add_straggler(out);
    }
    {
      // Every kind, zero when the job reads none of it, so a dashboard's
      // query finds the series before the first remote byte.
      std::vector<DataSourceTotals> totals = data_sources_ ? data_sources_() : std::vector<DataSourceTotals>{};
      for (const char* kind : kDataSourceKinds) {
        DataSourceTotals t;
        for (const auto& x : totals) {
          if (x.kind == kind) t.bytes += x.bytes, t.stalls += x.stalls, t.stall_seconds += x.stall_seconds;
        }
        const std::string k = kind;
        const std::string what = k == "s3" ? "S3" : "HTTP(S)";
        MetricFamily b = family("hpctrain_data_" + k + "_bytes_total",
                                "Shard bytes received from " + what + " sources", MetricType::Counter);
        b.metric.push_back(counter(t.bytes));
        MetricFamily n = family("hpctrain_data_" + k + "_stalls_total",
                                "Shard reads from " + what + " sources that waited for bytes not yet arrived",
                                MetricType::Counter);
        n.metric.push_back(counter(t.stalls));
        MetricFamily w = family("hpctrain_data_" + k + "_stall_seconds_total",
                                "Time shard reads waited for " + what + " sources", MetricType::Counter);
        w.metric.push_back(counter(t.stall_seconds));
        out.push_back(std::move(b));
        out.push_back(std::move(n));
        out.push_back(std::move(w));
      }
    }
    MetricFamily restarts = family("hpctrain_restarts_total",
                                   "Times the launcher restarted the job before this run", MetricType::Counter);
    restarts.metric.push_back(counter(restarts_));
    out.push_back(std::move(restarts));
    const auto p = read_process_stats();
    MetricFamily cpu = family("hpctrain_process_cpu_seconds_total",
                              "CPU time of the rank's process, user and system", MetricType::Counter);
    cpu.metric.push_back(counter(p.cpu_seconds));
    out.push_back(std::move(cpu));
    MetricFamily mem = family("hpctrain_process_resident_memory_bytes",
                              "Resident memory of the rank's process", MetricType::Gauge);
    ClientMetric g = base();
    g.gauge.value = static_cast<double>(p.resident_bytes);
    mem.metric.push_back(g);
    out.push_back(std::move(mem));
    MetricFamily peak = family("hpctrain_process_peak_resident_memory_bytes",
                               "Peak resident memory of the rank's process since it began (VmHWM)",
                               MetricType::Gauge);
    ClientMetric hwm = base();
    hwm.gauge.value = static_cast<double>(p.peak_resident_bytes);
    peak.metric.push_back(hwm);
    out.push_back(std::move(peak));
    return out;
  }

 private:
  // This rank's standing among the ranks (engine/straggler.h), as of the
  // engine's last exchange: zeros until then.
  void add_straggler(std::vector<MetricFamily>& out) const {
    const auto all = engine_->straggler_status();
    engine::StragglerRank me;
    if (engine_->rank() < static_cast<int>(all.size()))
      me = all[static_cast<std::size_t>(engine_->rank())];
    MetricFamily named =
        family("hpctrain_straggler",
               "1 on the cause (data, compute, network) while this rank is named the "
               "straggler: persistently slower than the median rank",
               MetricType::Gauge);
    for (auto cause : {engine::StragglerCause::kData, engine::StragglerCause::kCompute,
                       engine::StragglerCause::kNetwork}) {
      ClientMetric m = base();
      m.label.push_back({"cause", engine::straggler_cause_name(cause)});
      m.gauge.value = me.named && me.cause == cause ? 1 : 0;
      named.metric.push_back(std::move(m));
    }
    out.push_back(std::move(named));
    MetricFamily slow =
        family("hpctrain_straggler_slowdown_ratio",
               "This rank's work time over the median of the other ranks' less 1, over "
               "the last straggler window (HPCT_STRAGGLER_WINDOW_S)",
               MetricType::Gauge);
    ClientMetric g = base();
    g.gauge.value = me.slowdown;
    slow.metric.push_back(std::move(g));
    out.push_back(std::move(slow));
    MetricFamily late =
        family("hpctrain_straggler_late_seconds_total",
               "Time the other ranks (their median) waited for this rank beyond what it "
               "waited for them",
               MetricType::Counter);
    late.metric.push_back(counter(me.late_s));
    out.push_back(std::move(late));
    MetricFamily waited = family("hpctrain_straggler_wait_seconds_total",
                                 "Time this rank's callers were blocked waiting for collectives",
                                 MetricType::Counter);
    waited.metric.push_back(counter(me.waited_s));
    out.push_back(std::move(waited));
  }

  static MetricFamily family(const std::string& name, const std::string& help, MetricType type) {
    MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = type;
    return f;
  }
  ClientMetric base() const {
    ClientMetric m;
    m.label = labels_;
    return m;
  }
  ClientMetric counter(double v, ClientMetric::Label extra = {}) const {
    ClientMetric m = base();
    if (!extra.name.empty()) m.label.push_back(std::move(extra));
    m.counter.value = v;
    return m;
  }

  std::vector<ClientMetric::Label> labels_;
  double restarts_;
  const engine::Engine* engine_;
  const comm::Communicator* comm_;
  std::function<std::vector<DataSourceTotals>()> data_sources_;
};

// The endpoint's server: one thread answers GET /metrics, one connection at
// a time, each read and write bounded (a scraper that stalls is dropped
// after kIoTimeout). prometheus-cpp encodes the body (TextSerializer).
// Not civetweb (prometheus-cpp's own server): its threads ask for a small
// fixed stack, which a process that loads libtorch and OpenBLAS cannot give
// them (their static TLS alone takes more), so its server never starts there.
class MetricsServer {
 public:
  using Body = std::function<std::string()>;
  MetricsServer(const std::string& address, int port, Body body) : body_(std::move(body)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
      throw_invalid_argument("metrics endpoint: '" + address + "' is not an IPv4 address");
    }
    listener_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    ::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (!listener_.valid() || ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_.get(), 16) != 0) {
      throw Error(ErrorCode::kIo, std::strerror(errno));
    }
    socklen_t len = sizeof a;
    ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw Error(ErrorCode::kIo, std::strerror(errno));
    stop_read_ = UniqueFd(p[0]);
    stop_write_ = UniqueFd(p[1]);
    thread_ = std::thread([this] { serve(); });
  }
  ~MetricsServer() {
    char c = 0;
    (void)!::write(stop_write_.get(), &c, 1);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  static constexpr int kIoTimeoutMs = 2000;

  void serve() {
    while (true) {
      pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      UniqueFd c(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (c.valid()) answer(c.get());
    }
  }

  void answer(int fd) {
    timeval tv{kIoTimeoutMs / 1000, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string request;
    char buf[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;  // closed, or silent past the bound
      request.append(buf, static_cast<size_t>(n));
    }
    const bool metrics = request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0;
    const std::string body = metrics ? body_() : "not found: this endpoint serves GET /metrics\n";
    std::string reply = std::string(metrics ? "HTTP/1.1 200 OK" : "HTTP/1.1 404 Not Found") +
                        "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    net::try_write_all(fd, reply, SteadyClock::now() + Millis(kIoTimeoutMs));
  }

  Body body_;
  UniqueFd listener_;
  UniqueFd stop_read_;
  UniqueFd stop_write_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

struct RankMetrics::Impl {
  std::string address;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<ScrapeTimeFamilies> scraped;
  std::unique_ptr<MetricsServer> server;
  prometheus::Counter* samples = nullptr;
  prometheus::Counter* steps = nullptr;
  prometheus::Histogram* step = nullptr;
  prometheus::Counter* membership_changes = nullptr;
  prometheus::Gauge* world_size = nullptr;
  std::array<prometheus::Gauge*, 4> memory{};  // parameters, gradients, optimizer state, parameters' peak
  std::array<prometheus::Histogram*, 4> phases{};
  std::mutex mu;  // prometheus-cpp's metrics are thread-safe; this orders a step's updates

  std::string scrape() const {
    auto families = registry->Collect();
    auto more = scraped->Collect();
    families.insert(families.end(), more.begin(), more.end());
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return out.str();
  }
};

RankMetrics::RankMetrics(const RankMetricsOptions& o) : impl_(std::make_unique<Impl>()) {
  const std::map<std::string, std::string> labels = {
      {"rank", std::to_string(o.rank)}, {"host", o.host}, {"launch_id", o.launch_id}};
  auto& r = *impl_->registry;
  impl_->samples = &prometheus::BuildCounter()
                        .Name("hpctrain_samples_total")
                        .Help("Training samples this rank has processed")
                        .Labels(labels)
                        .Register(r)
                        .Add({});
  impl_->steps = &prometheus::BuildCounter()
                      .Name("hpctrain_steps_total")
                      .Help("Training steps this rank has finished")
                      .Labels(labels)
                      .Register(r)
                      .Add({});
  impl_->step = &prometheus::BuildHistogram()
                     .Name("hpctrain_step_seconds")
                     .Help("Time of a whole training step")
                     .Labels(labels)
                     .Register(r)
                     .Add({}, step_buckets());
  impl_->membership_changes = &prometheus::BuildCounter()
                                    .Name("hpctrain_membership_changes_total")
                                    .Help("Times an elastic job's membership changed (ranks left or joined)")
                                    .Labels(labels)
                                    .Register(r)
                                    .Add({});
  impl_->world_size = &prometheus::BuildGauge()
                            .Name("hpctrain_world_size")
                            .Help("Ranks in the job's current world")
                            .Labels(labels)
                            .Register(r)
                            .Add({});
  const char* memory[4][2] = {
      {"hpctrain_parameter_bytes", "Bytes of the model's parameters this rank holds"},
      {"hpctrain_gradient_bytes", "Bytes of gradients this rank holds for its optimizer step"},
      {"hpctrain_optimizer_state_bytes", "Bytes of optimizer state this rank holds"},
      {"hpctrain_parameter_peak_bytes",
       "The most parameter bytes this rank has held at once (sharded: with the layers gathered)"}};
  for (int i = 0; i < 4; ++i) {
    impl_->memory[i] =
        &prometheus::BuildGauge().Name(memory[i][0]).Help(memory[i][1]).Labels(labels).Register(r).Add({});
  }
  auto& phases = prometheus::BuildHistogram()
                     .Name("hpctrain_step_phase_seconds")
                     .Help("Time of a step's parts: data wait, forward and backward, gradient sync, optimizer")
                     .Labels(labels)
                     .Register(r);
  const char* names[4] = {"data", "compute", "sync", "optimizer"};
  for (int i = 0; i < 4; ++i) impl_->phases[i] = &phases.Add({{"phase", names[i]}}, step_buckets());
  std::vector<ClientMetric::Label> flat;
  for (const auto& [k, v] : labels) flat.push_back({k, v});
  impl_->scraped = std::make_shared<ScrapeTimeFamilies>(flat, o.restarts, o.engine, o.comm, o.data_sources);

  const std::string listen = o.bind_address + ":" + std::to_string(o.port);
  try {
    impl_->server = std::make_unique<MetricsServer>(o.bind_address, o.port, [impl = impl_.get()] {
      return impl->scrape();
    });
  } catch (const Error& e) {
    throw Error(ErrorCode::kIo, "metrics endpoint of rank " + std::to_string(o.rank) + ": cannot listen on " +
                                    listen + " (" + e.what() +
                                    "); choose another base port with hpctrain launch --metrics-port or "
                                    "HPCT_METRICS_PORT, or 0 to turn the endpoints off");
  }
  impl_->address = o.bind_address;
}

RankMetrics::~RankMetrics() = default;

int RankMetrics::port() const { return impl_->server->port(); }

std::string RankMetrics::url() const {
  return "http://" + impl_->address + ":" + std::to_string(port()) + "/metrics";
}

void RankMetrics::record_step(std::int64_t samples, double data_s, double compute_s, double sync_s,
                              double optimizer_s) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->samples->Increment(static_cast<double>(samples));
  impl_->steps->Increment();
  impl_->step->Observe(data_s + compute_s + sync_s + optimizer_s);
  const double parts[4] = {data_s, compute_s, sync_s, optimizer_s};
  for (int i = 0; i < 4; ++i) impl_->phases[i]->Observe(parts[i]);
}

void RankMetrics::record_world(std::int64_t changes, int size) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  const double more = static_cast<double>(changes) - impl_->membership_changes->Value();
  if (more > 0) impl_->membership_changes->Increment(more);
  impl_->world_size->Set(size);
}

void RankMetrics::record_memory(const MemoryBytes& bytes) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->memory[0]->Set(bytes.parameters);
  impl_->memory[1]->Set(bytes.gradients);
  impl_->memory[2]->Set(bytes.optimizer_state);
  impl_->memory[3]->Set(bytes.parameters_peak);
}

std::unique_ptr<RankMetrics> rank_metrics_from_config(const Config& config, const WorldInfo& world,
                                                      const Env& env, const engine::Engine* engine,
                                                      const comm::Communicator* comm,
                                                      std::function<std::vector<DataSourceTotals>()> data_sources) {
  if (config.metrics_port == 0) return nullptr;
  if (config.metrics_port < 0 || config.metrics_port + world.local_rank > 65535) {
    throw_invalid_argument("HPCT_METRICS_PORT=" + std::to_string(config.metrics_port) +
                           ": a base port in 1..65535 (rank r listens on base + local rank), or 0 for off");
  }
  RankMetricsOptions o;
  o.port = static_cast<int>(config.metrics_port) + world.local_rank;
  o.rank = world.rank;
  o.restarts = world.restart;
  o.engine = engine;
  o.comm = comm;
  o.data_sources = std::move(data_sources);
  o.launch_id = env.get("HPCT_JOB_ID").value_or("hpctrain");
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  o.host = env.get("HPCT_HOSTNAME").value_or(name);
  if (!config.bind_address.empty()) {
    o.bind_address = config.bind_address;
  } else if (!config.store_addr.empty()) {
    o.bind_address = comm::local_address_towards(config.store_addr.substr(0, config.store_addr.rfind(':')));
  }
  return std::make_unique<RankMetrics>(o);
}

}  // namespace hpct::metrics
