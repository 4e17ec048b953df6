// `hpctrain bench data`: JPEG decode throughput per thread next to
// libjpeg-turbo's own decode loop on the same images, and the Loader's
// throughput with 1..N decode threads, as JSON lines.
//
// With --source URL... it measures reading remote shards instead: each round
// streams the shards through hpctrain's reader (ShardFileSystem: download,
// walk the tar, read every member) and, alternating with it, downloads them
// with `curl -s -o /dev/null` (http and https only); it reports both rates,
// their ratio (median of the rounds' paired ratios), the time from the
// reader's request to the first sample read and decoded (first_sample_s;
// making the file system before it is setup_s), and that time against
// curl's time to the first shard's first byte (connect, request, answer) in
// the same round; curl's time to connect (one round trip) is printed too.
//
// With --source DIR (a directory of .tar shards, at a path every host sees:
// a shared directory, the scratch file system, a local disk) it measures
// the aggregate read throughput of hosts reading at once: with host options
// (-H, --hostfile, -i, --ssh-option; bench_hosts.h) it starts one reader per
// slot through `hpctrain launch`; reader r of n reads the shards i with
// i % n == r (sorted by name) through the same reader as above, all starting
// together (a barrier). Each pass is cold on the reading host: its page
// cache of its shards is dropped first (posix_fadvise DONTNEED), as a fresh
// job would find it; the server side (an NFS/sshfs server, a brick) keeps
// whatever it caches. Each reader prints one JSON line ("what":"host_read");
// reader 0 prints the aggregate ("what":"aggregate_read": the bytes of a
// pass over all readers over the time of the slowest reader, the median of
// --rounds passes; "hosts" counts distinct host names, "readers" the ranks).
// Without host options it reads DIR on this host alone.
//
// The images are Fashion-MNIST test images scaled to --size (bilinear, grey
// replicated to RGB) and encoded as JPEG quality 90, packed into tar shards
// in a temporary directory, so the benchmark needs no download.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bench_hosts.h"
#include "comm/connect.h"
#include "commands.h"
#include "core/subprocess.h"
#include "core/units.h"
#include "data/source/url.h"
#include "core/clock.h"
#include "core/error.h"
#include "data/decode/augment.h"
#include "data/formats/idx.h"
#include "data/decode/image.h"
#include "data/decode/jpeg_reference.h"
#include "data/loader.h"
#include "data/source/shard_list.h"
#include "data/source/remote_fs.h"
#include "data/formats/tar.h"
#include "data/formats/shard_writer.h"

namespace hpct::cli {
namespace {

struct DataArgs {
  int images = 256;
  int epoch_samples = 2048;  // loader epoch: the images repeated (long enough to hide the pipeline's fill and drain)
  int size = 224;
  int max_threads = 2;
  double seconds = 1.5;   // measuring time: seconds x rounds (x max_threads for the loader)
  int rounds = 3;
  std::int64_t batch = 32;
  std::vector<std::string> sources;  // --source: remote shards to stream, or one directory
  SourceFlags source_flags;
  BenchHosts hosts;                  // --source DIR read by every host at once
  bool worker = false;               // internal: one reader of DIR
  double timeout_s = 1800;
};

double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// One pass of hpctrain's reader over the shards: every member read, the
// first image decoded. Returns bytes; *first_sample_s: from the reader's
// request (the shards announced, which starts the file system's fetch
// threads, and the first one opened) to the first sample read and decoded;
// *setup_s: making the file system before that (settings, no thread, no
// connection). libcurl's process-wide set-up (0.6-0.7 ms here) falls in the
// first pass of a process only. The pass's time, timed by the caller,
// includes everything.
std::uint64_t stream_pass(const Config& config, const std::vector<std::string>& shards, double* first_sample_s,
                          nlohmann::json* stats, double* setup_s = nullptr) {
  const auto t_setup = SteadyClock::now();
  auto fs = data::make_shard_file_system(config, Logger::from_config(config, -1));
  if (setup_s) *setup_s = seconds_since(t_setup);
  const auto t0 = SteadyClock::now();
  fs->will_read(shards);
  std::uint64_t bytes = 0;
  *first_sample_s = -1;
  for (const auto& url : shards) {
    auto file = fs->open_read(url);
    data::TarScanner scan(*file);
    while (auto m = scan.next()) {
      std::string body = data::read_member(*file, *m);
      if (*first_sample_s < 0 && (m->name.size() > 4 && (m->name.substr(m->name.size() - 4) == ".png" ||
                                                          m->name.substr(m->name.size() - 4) == ".jpg"))) {
        data::Image img;
        data::decode_image_into(body, 0, &img);
        *first_sample_s = seconds_since(t0);
      }
    }
    bytes += file->size();
  }
  *stats = fs->stats();
  return bytes;
}

int run_bench_source(const DataArgs& a, const Config& config) {
  auto probe = data::make_shard_file_system(config, Logger::from_config(config, -1));
  const auto shards = data::expand_shard_list(a.sources, *probe);
  const bool curl_ok = std::all_of(shards.begin(), shards.end(), [](const std::string& u) {
    return u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0;
  });
  // curl prints each transfer's time to connect (the TCP handshake: one
  // round trip) and to its first byte (connect, request, the server's
  // answer): the least any reader on a new connection takes to its first
  // sample. Only the first shard's figures are read.
  std::string curl_cmd = "curl -sSf --max-time 600 -w '%{time_connect} %{time_starttransfer}\\n'";
  if (!config.data_ca_file.empty()) curl_cmd += " --cacert '" + config.data_ca_file + "'";
  for (const auto& u : shards) curl_cmd += " -o /dev/null '" + u + "'";
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::vector<double> ours, theirs, ratios, first, setups, curl_ttfb, curl_rtt, first_ratios;
  std::uint64_t bytes = 0;
  nlohmann::json stats;
  for (int r = 0; r < a.rounds; ++r) {
    double first_s = 0, setup_s = 0;
    auto t0 = SteadyClock::now();
    bytes = stream_pass(config, shards, &first_s, &stats, &setup_s);
    const double s_ours = seconds_since(t0);
    ours.push_back(bytes / s_ours);
    first.push_back(first_s);
    setups.push_back(setup_s);
    if (curl_ok) {
      t0 = SteadyClock::now();
      FILE* p = ::popen(curl_cmd.c_str(), "r");
      if (p == nullptr) throw Error(ErrorCode::kIo, "bench data: cannot run curl: " + curl_cmd);
      double ttfb = -1, rtt = -1;
      if (std::fscanf(p, "%lf %lf", &rtt, &ttfb) != 2) ttfb = -1;
      char rest[4096];
      while (std::fread(rest, 1, sizeof rest, p) > 0) {
      }
      if (::pclose(p) != 0 || ttfb < 0)
        throw Error(ErrorCode::kIo, "bench data: curl failed: " + curl_cmd);
      const double s_curl = seconds_since(t0);
      theirs.push_back(bytes / s_curl);
      ratios.push_back(s_curl / s_ours);
      curl_ttfb.push_back(ttfb);
      curl_rtt.push_back(rtt);
      if (ttfb > 0) first_ratios.push_back(first_s / ttfb);
    }
  }
  nlohmann::json j = {{"bench", "data"},
                      {"what", "stream"},
                      {"shards", shards.size()},
                      {"bytes", bytes},
                      {"rounds", a.rounds},
                      {"fetches", config.data_fetches},
                      {"bytes_per_s", median(ours)},
                      {"first_sample_s", median(first)},    // from the request; setup excluded
                      {"first_sample_min_s", *std::min_element(first.begin(), first.end())},
                      {"setup_s", median(setups)},          // making the file system (before the request)
                      {"sources", stats}};
  if (curl_ok) {
    j["curl_bytes_per_s"] = median(theirs);
    j["ratio_to_curl"] = median(ratios);
    j["curl_call"] = "curl -o /dev/null, one process for all shards";
    j["curl_first_byte_s"] = median(curl_ttfb);                   // of the first shard
    j["curl_first_byte_min_s"] = *std::min_element(curl_ttfb.begin(), curl_ttfb.end());
    j["curl_connect_s"] = median(curl_rtt);                       // its TCP handshake: one round trip
    j["first_sample_to_curl_first_byte"] = median(first_ratios);  // paired by round
  }
  std::cout << j.dump() << std::endl;
  return 0;
}

// --- DIR read by every host at once ---

// DIR's .tar files, sorted by name. InvalidArgument naming the host when
// there are none (the path is not the same on every host, or nothing was
// packed there).
std::vector<std::string> shards_in_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto& p = it->path();
    if (p.extension() == ".tar" && it->is_regular_file()) out.push_back(p.string());
  }
  if (ec) {
    throw_invalid_argument("bench data --source " + dir + ": cannot list it on " + host + " (" + ec.message() +
                           "): fix: give a directory every host sees at that path");
  }
  if (out.empty()) {
    throw_invalid_argument("bench data --source " + dir + ": no .tar shards in it on " + host +
                           ": fix: pack some there first (hpctrain data pack ... -o " + dir + "/train-%06d.tar)");
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Drops this host's page cache of the files (best effort: a file system
// that keeps no page cache has nothing to drop).
void drop_page_cache(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0.0;
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// One reader: this host's share of DIR, --rounds cold passes, each started
// with the others (comm: null for a reader alone).
int run_dir_reader(const DataArgs& a, const Config& config, comm::Communicator* comm) {
  const std::string dir = a.sources.at(0);
  const int rank = comm ? comm->rank() : 0, size = comm ? comm->size() : 1;
  const auto all = shards_in_dir(dir);
  std::vector<std::string> mine;
  for (size_t i = 0; i < all.size(); ++i) {
    if (static_cast<int>(i % static_cast<size_t>(size)) == rank) mine.push_back(all[i]);
  }
  comm::BarrierOptions barrier_opts;
  barrier_opts.timeout = seconds_to_millis(a.timeout_s);
  std::vector<double> secs, aggregate;
  std::uint64_t bytes = 0;
  std::int64_t total = 0;
  for (int r = 0; r < a.rounds; ++r) {
    drop_page_cache(mine);
    if (comm) comm::barrier(*comm, barrier_opts);
    double first_s = 0;
    nlohmann::json stats;
    const auto t0 = SteadyClock::now();
    bytes = mine.empty() ? 0 : stream_pass(config, mine, &first_s, &stats);
    const double s = seconds_since(t0);
    secs.push_back(s);
    std::vector<std::int64_t> all_bytes = {static_cast<std::int64_t>(bytes)};
    std::vector<std::int64_t> all_us = {static_cast<std::int64_t>(s * 1e6)};
    if (comm) {
      all_bytes = comm::allgather_value(*comm, static_cast<std::int64_t>(bytes));
      all_us = comm::allgather_value(*comm, static_cast<std::int64_t>(s * 1e6));
    }
    total = 0;
    for (auto b : all_bytes) total += b;
    const double slowest = *std::max_element(all_us.begin(), all_us.end()) / 1e6;
    aggregate.push_back(total / std::max(slowest, 1e-9));
  }
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  // Hosts, not readers: a host with several slots runs several readers.
  std::vector<std::int64_t> host_ids = {0};
  if (comm) host_ids = comm::allgather_value(*comm, static_cast<std::int64_t>(std::hash<std::string>{}(host)));
  std::sort(host_ids.begin(), host_ids.end());
  const auto hosts = std::unique(host_ids.begin(), host_ids.end()) - host_ids.begin();
  const double s = median_of(secs);
  std::cout << nlohmann::json{{"bench", "data"}, {"what", "host_read"}, {"host", host}, {"rank", rank},
                              {"dir", dir},      {"shards", mine.size()},  {"bytes", bytes},
                              {"rounds", a.rounds}, {"seconds", s},
                              {"mb_per_s", s > 0 ? bytes / s / 1e6 : 0.0}}
                   .dump()
            << std::endl;
  if (comm) comm::barrier(*comm, barrier_opts);
  if (rank == 0) {
    std::vector<double> passes;
    for (double x : aggregate) passes.push_back(x / 1e6);
    const double mbs = median_of(passes);
    std::cout << nlohmann::json{{"bench", "data"},  {"what", "aggregate_read"}, {"dir", dir},
                                {"hosts", hosts},   {"readers", size},           {"shards", all.size()},
                                {"bytes", total},
                                {"rounds", a.rounds}, {"seconds", mbs > 0 ? total / 1e6 / mbs : 0.0},
                                {"mb_per_s", mbs},  {"pass_mb_per_s", passes}}
                     .dump()
              << std::endl;
  }
  return 0;
}

// The parent: one reader per slot of the hosts, through hpctrain launch.
int run_dir_across_hosts(const DataArgs& a) {
  std::vector<std::string> argv =
      a.hosts.launch_prefix(0, "gloo", {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}});
  argv.push_back(self_executable());
  argv.insert(argv.end(), {"bench", "data", "--worker", "--source", a.sources.at(0), "--rounds",
                           std::to_string(a.rounds), "--timeout-s", std::to_string(a.timeout_s)});
  std::fflush(stdout);
  auto r = run_subprocess(argv, {}, seconds_to_millis(a.timeout_s + 60));
  if (r.timed_out) {
    throw_timeout("bench data --source " + a.sources.at(0) + " across hosts did not finish within " +
                  std::to_string(a.timeout_s + 60) + " s: " + join_command(argv));
  }
  if (r.signal == 0 && r.exit_code == 0) return 0;
  std::fprintf(stderr, "hpctrain: bench data across hosts failed (%s %d): %s\n", r.signal ? "signal" : "exit code",
               r.signal ? r.signal : r.exit_code, join_command(argv).c_str());
  return r.exit_code ? r.exit_code : 1;
}

// Whether --source names one local directory (read by hosts at once) rather
// than remote shards.
bool source_is_dir(const DataArgs& a) {
  if (a.sources.size() != 1 || data::is_remote_url(a.sources[0])) return false;
  std::error_code ec;
  return a.hosts.any() || a.worker || std::filesystem::is_directory(a.sources[0], ec);
}

int run_bench_dir(const DataArgs& a, const Config& config) {
  if (a.rounds < 1) throw_invalid_argument("bench data: --rounds must be at least 1");
  if (a.worker) {
    Logger log = Logger::from_config(config, -1);
    comm::World world = comm::connect_world(config, ProcessEnv(), log);
    return run_dir_reader(a, config, world.comm->size() > 1 ? world.comm.get() : nullptr);
  }
  if (a.hosts.any()) return run_dir_across_hosts(a);
  return run_dir_reader(a, config, nullptr);
}

// The seconds fn takes.
template <typename Fn>
double time_it(Fn&& fn) {
  const auto t0 = SteadyClock::now();
  fn();
  return seconds_since(t0);
}

// --images JPEGs of --size pixels, from Fashion-MNIST's test images
// (resized, with a little colour).
std::vector<std::string> make_jpegs(const DataArgs& a, const data::IdxArray& im) {
  std::vector<std::string> jpegs;
  for (int i = 0; i < a.images; ++i) {
    data::Image g;
    g.height = g.width = 28;
    g.channels = 1;
    const size_t k = static_cast<size_t>(i) % im.items();
    g.pixels.assign(im.values.begin() + static_cast<std::ptrdiff_t>(k * 784),
                    im.values.begin() + static_cast<std::ptrdiff_t>((k + 1) * 784));
    data::Image big = data::resize_bilinear(g, a.size, a.size);
    data::Image rgb;
    rgb.height = rgb.width = a.size;
    rgb.channels = 3;
    rgb.pixels.resize(big.pixels.size() * 3);
    for (size_t p = 0; p < big.pixels.size(); ++p) {
      // A little colour, so the chroma planes carry data.
      rgb.pixels[3 * p] = big.pixels[p];
      rgb.pixels[3 * p + 1] = static_cast<std::uint8_t>(big.pixels[p] * 3 / 4);
      rgb.pixels[3 * p + 2] = static_cast<std::uint8_t>(255 - big.pixels[p]);
    }
    jpegs.push_back(data::encode_jpeg(rgb, 90));
  }
  return jpegs;
}

// The Loader end to end (index, read, decode, batch as uint8 tensors):
// one epoch with each thread count in turn, repeated; speedup is the
// median of the paired ratios against 1 thread. One line per thread count.
void bench_loader(const DataArgs& a, const std::vector<std::string>& shards) {
  std::vector<std::unique_ptr<data::Loader>> loaders;
  for (int t = 1; t <= a.max_threads; ++t) {
    data::LoaderOptions o;
    o.shards = shards;
    o.batch_size = a.batch;
    o.threads = t;
    o.prefetch = 2 * t + 2;
    o.image_fields = {"jpg"};
    loaders.push_back(std::make_unique<data::Loader>(o));
  }
  std::int64_t epoch = 0;
  auto run_epoch = [&](data::Loader& l) {
    data::Batch b;
    l.start_epoch(epoch);
    while (l.next(&b)) {
    }
  };
  for (auto& l : loaders) run_epoch(*l);  // warm up
  std::vector<std::vector<double>> rates(a.max_threads + 1), speedups(a.max_threads + 1);
  const auto t_loader = SteadyClock::now();
  while (seconds_since(t_loader) < a.seconds * a.rounds * a.max_threads) {
    ++epoch;
    std::vector<double> secs(a.max_threads + 1);
    for (int t = 1; t <= a.max_threads; ++t) {
      secs[t] = time_it([&] { run_epoch(*loaders[t - 1]); });
      rates[t].push_back(a.epoch_samples / secs[t]);
      speedups[t].push_back(secs[1] / secs[t]);
    }
  }
  for (int t = 1; t <= a.max_threads; ++t) {
    nlohmann::json j = {{"bench", "data"},         {"what", "loader"},
                        {"threads", t},            {"images", a.epoch_samples},
                        {"size", a.size},          {"batch", a.batch},
                        {"epochs", rates[t].size()}, {"images_per_s", median_of(rates[t])},
                        {"speedup", median_of(speedups[t])}, {"cores", ::sysconf(_SC_NPROCESSORS_ONLN)}};
    std::cout << j.dump() << std::endl;
  }
}

int run_bench_data(const DataArgs& a) {
  if (a.images < 1 || a.epoch_samples < 1 || a.size < 8 || a.max_threads < 1 || a.rounds < 1) {
    throw_invalid_argument("bench data: --images, --size, --max-threads and --rounds must be positive");
  }
  namespace fs = std::filesystem;
  auto [ip, lp] = data::fashion_mnist_files(data::kFashionMnistDir, "test");
  data::IdxArray im = data::read_idx(ip), lb = data::read_idx(lp);
  const std::vector<std::string> jpegs = make_jpegs(a, im);
  std::string tmpl = (fs::temp_directory_path() / "hpctrain-bench-data-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmpl};
  data::ShardWriterOptions wo;
  wo.pattern = tmpl + "/bench-%04d.tar";
  wo.max_count = 256;
  data::ShardWriter writer(wo);
  for (int i = 0; i < a.epoch_samples; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "%06d", i);
    const size_t k = static_cast<size_t>(i) % jpegs.size();
    writer.write(key, {{"jpg", jpegs[k]}, {"cls", std::to_string(lb.values[k % lb.items()])}});
  }
  writer.close();
  std::uint64_t jpeg_bytes = 0;
  for (const auto& j : jpegs) jpeg_bytes += j.size();

  // Decode per thread, ours next to the reference: one pass over the images
  // each, alternating, for --seconds x --rounds; the figure is the median of
  // the paired ratios (a pair shares whatever else the machine is doing),
  // the rates are the medians of each side.
  data::Image scratch;  // reused, as the loader reuses one per batch
  auto ours_pass = [&] {
    for (const auto& j : jpegs) data::decode_image_into(j, 0, &scratch);
  };
  auto ref_pass = [&] { data::reference_jpeg_decode(jpegs, 1); };
  ours_pass();
  ref_pass();
  std::vector<double> ratios, ours_rates, ref_rates;
  const auto t_all = SteadyClock::now();
  while (seconds_since(t_all) < a.seconds * a.rounds) {
    const double tr = time_it(ref_pass), to = time_it(ours_pass);
    ratios.push_back(tr / to);
    ours_rates.push_back(a.images / to);
    ref_rates.push_back(a.images / tr);
  }
  nlohmann::json d = {{"bench", "data"},
                      {"what", "jpeg_decode_per_thread"},
                      {"images", a.images},
                      {"size", a.size},
                      {"mean_jpeg_bytes", jpeg_bytes / jpegs.size()},
                      {"pairs", ratios.size()},
                      {"images_per_s", median_of(ours_rates)},
                      {"reference_images_per_s", median_of(ref_rates)},
                      {"reference_call", "jpeg_read_scanlines"},
                      {"ratio", median_of(ratios)}};
  std::cout << d.dump() << std::endl;

  bench_loader(a, writer.shards());
  return 0;
}

}  // namespace

void add_bench_data_command(CLI::App& bench, Cli& cli) {
  auto args = std::make_shared<DataArgs>();
  auto* c = bench.add_subcommand("data", "JPEG decode vs libjpeg-turbo, and loader thread scaling");
  c->add_option("--images", args->images, "Distinct images")->capture_default_str();
  c->add_option("--epoch-samples", args->epoch_samples, "Samples per loader epoch (images repeated)")
      ->capture_default_str();
  c->add_option("--size", args->size, "Image side in pixels")->capture_default_str();
  c->add_option("--max-threads", args->max_threads, "Loader threads to try: 1..N")->capture_default_str();
  c->add_option("--seconds", args->seconds, "Seconds per measurement")->capture_default_str();
  c->add_option("--rounds", args->rounds, "Measure for --seconds x --rounds (x threads for the loader)")
      ->capture_default_str();
  c->add_option("--batch", args->batch, "Loader batch size")->capture_default_str();
  c->add_option("--source", args->sources,
                 "Instead: stream these remote shards (URLs, brace ranges) and compare with curl -o /dev/null; "
                 "or one directory of .tar shards, read by every host at once (with the host options)");
  add_source_flags(c, &args->source_flags);
  add_bench_host_options(c, &args->hosts);
  c->add_option("--timeout-s", args->timeout_s, "Bound on a run across hosts")->capture_default_str();
  c->add_flag("--worker", args->worker, "Internal: one reader of --source DIR")->group("");
  c->callback([args, &cli] {
    cli.run = [args, &cli] {
      if (args->sources.empty()) return run_bench_data(*args);
      apply_source_flags(args->source_flags, &cli.config);
      if (source_is_dir(*args)) return run_bench_dir(*args, cli.config);
      if (args->hosts.any()) {
        throw_invalid_argument("bench data: across hosts, --source takes one directory of .tar shards (a path "
                               "every host sees), not URLs");
      }
      return run_bench_source(*args, cli.config);
    };
  });
}

}  // namespace hpct::cli
