// `hpctrain data pack|inspect|index|verify|serve`: make WebDataset shards
// (or TFRecord files), look inside them, write their sidecar indexes, check
// them, and serve them to a job's ranks.
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/fd.h"
#include "core/log.h"
#include "core/units.h"
#include "data/serve/data_server.h"
#include "data/formats/idx.h"
#include "data/formats/pack.h"
#include "data/formats/shard_check.h"
#include "data/formats/shard_toc.h"
#include "data/shard_index.h"
#include "data/source/shard_list.h"
#include "data/source/remote_fs.h"
#include "data/source/url.h"
#include "data/formats/tfrecord.h"
#include "store/secret.h"

namespace hpct::cli {
namespace {

// A one-line progress bar on stderr when it is a terminal; otherwise a line
// per tenth, so logs stay readable.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), tty_(::isatty(2) != 0) {}
  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_ || total == 0) return;
    const int tenth = static_cast<int>(done * 10 / total);
    if (tty_) {
      if (done != total && done % 256 != 0) return;
      const int width = 40, fill = static_cast<int>(done * width / total);
      std::fprintf(stderr, "\r[%s%s] %llu/%llu samples", std::string(fill, '#').c_str(),
                   std::string(width - fill, ' ').c_str(), static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(total));
      if (done == total) std::fprintf(stderr, "\n");
    } else if (tenth > last_tenth_) {
      std::fprintf(stderr, "pack: %d%% (%llu/%llu samples)\n", tenth * 10,
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
    }
    last_tenth_ = tenth;
  }

 private:
  bool enabled_;
  bool tty_;
  int last_tenth_ = 0;
};

struct PackArgs {
  std::vector<std::string> from;
  std::string split = "train";
  std::string dir = data::kFashionMnistDir;
  std::string output;
  std::uint64_t max_count = 10000;
  std::string max_size = "1G";
  std::string image_format = "png";
  std::string format;  // tar | tfrecord; empty: from the output's extension
  std::int64_t shuffle_seed = 0;
  bool quiet = false;
  bool no_index = false;
};

// Set by SIGINT/SIGTERM; the only state a signal handler may touch.
volatile std::sig_atomic_t g_stop_requested = 0;

void on_stop_signal(int) { g_stop_requested = 1; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int run_pack(const PackArgs& a, const Config& config) {
  data::ShardWriterOptions out;
  out.fs = data::make_shard_file_system(config, Logger::from_config(config, -1));
  out.pattern = a.output;
  out.max_count = a.max_count;
  out.max_size = parse_bytes(a.max_size);
  out.write_index = !a.no_index;
  // The Loader tells the formats apart by the file name, so the name and the
  // format must agree.
  const bool tfrecord_name = data::is_tfrecord_path(a.output);
  const std::string format = a.format.empty() ? (tfrecord_name ? "tfrecord" : "tar") : a.format;
  if (format != "tar" && format != "tfrecord") {
    throw_invalid_argument("--format " + format + ": expected tar or tfrecord");
  }
  if ((format == "tfrecord") != tfrecord_name) {
    throw_invalid_argument("-o " + a.output + " does not name a " + format +
                           " file: readers pick the format from the name, so use " +
                           (format == "tfrecord" ? "a .tfrecord pattern, e.g. out/train-%05d.tfrecord"
                                                 : "a .tar pattern, e.g. out/train-%06d.tar"));
  }
  out.format = format == "tfrecord" ? data::ShardFormat::kTfRecord : data::ShardFormat::kTar;
  data::format_shard_name(a.output, 0);  // refuse a bad pattern before reading anything
  ProgressBar bar(!a.quiet);
  // An interrupted pack stops between samples by throwing: the shard being
  // written is dropped uncommitted (a local temporary is removed, an S3
  // multipart upload is aborted), so no half shard appears.
  install_stop_handlers();
  auto progress = [&](std::uint64_t d, std::uint64_t t) {
    if (g_stop_requested != 0) throw Error(ErrorCode::kIo, "pack interrupted by a signal; the shard being written was dropped");
    bar.update(d, t);
  };
  data::PackResult r;
  if (a.from.at(0) == "fashion-mnist") {
    if (a.from.size() > 1) throw_invalid_argument("--from fashion-mnist takes no directory (see --dir)");
    r = data::pack_fashion_mnist(a.dir, a.split, a.image_format, out, progress);
  } else if (a.from[0] == "folder") {
    if (a.from.size() != 2) throw_invalid_argument("--from folder needs a directory: --from folder DIR");
    r = data::pack_folder(a.from[1], a.shuffle_seed, out, progress);
  } else {
    throw_invalid_argument("--from " + a.from[0] + ": expected fashion-mnist or folder DIR");
  }
  std::printf("packed %llu samples into %zu shards (%s)\n", static_cast<unsigned long long>(r.samples),
              r.shards.size(), format_bytes(r.bytes).c_str());
  for (size_t i = 0; i < r.classes.size(); ++i) std::printf("class %zu: %s\n", i, r.classes[i].c_str());
  return 0;
}

std::vector<std::string> expand(const std::vector<std::string>& items, data::FileSystem& fs) {
  auto shards = data::expand_shard_list(items, fs);
  if (shards.empty()) throw_invalid_argument("no shards given");
  return shards;
}

int run_inspect(const std::vector<std::string>& items, bool json, const Config& config) {
  auto fsp = data::make_shard_file_system(config, Logger::from_config(config, -1));
  auto& fs = *fsp;
  std::uint64_t samples = 0, bytes = 0;
  auto shards = expand(items, fs);
  fs.will_read(shards);
  for (const auto& path : shards) {
    data::ShardSummary s = data::inspect_shard(fs, path);
    samples += s.samples;
    bytes += s.file_bytes;
    if (json) {
      nlohmann::json j = {{"shard", s.path}, {"bytes", s.file_bytes}, {"samples", s.samples},
                          {"members", s.members}};
      for (const auto& [ext, f] : s.fields) {
        j["fields"][ext] = {{"count", f.count}, {"bytes", f.bytes}, {"min_bytes", f.min_bytes},
                            {"max_bytes", f.max_bytes}};
      }
      std::cout << j.dump() << "\n";
      continue;
    }
    std::printf("%s: %llu samples, %llu members, %s\n", s.path.c_str(),
                static_cast<unsigned long long>(s.samples), static_cast<unsigned long long>(s.members),
                format_bytes(s.file_bytes).c_str());
    for (const auto& [ext, f] : s.fields) {
      std::printf("  .%-8s %8llu  total %-8s min %-8s max %s\n", ext.c_str(),
                  static_cast<unsigned long long>(f.count), format_bytes(f.bytes).c_str(),
                  format_bytes(f.min_bytes).c_str(), format_bytes(f.max_bytes).c_str());
    }
  }
  if (!json) {
    std::printf("total: %llu samples, %s\n", static_cast<unsigned long long>(samples),
                format_bytes(bytes).c_str());
  }
  return 0;
}

// Writes "<shard>.idx" beside each shard (shard_toc.h), reading each once.
int run_index(const std::vector<std::string>& items, const Config& config) {
  auto fsp = data::make_shard_file_system(config, Logger::from_config(config, -1));
  auto& fs = *fsp;
  auto paths = expand(items, fs);
  for (const auto& path : paths) {
    if (data::is_toc_path(path)) continue;
    if (data::is_remote_url(path) && path.rfind("s3://", 0) != 0) {
      throw_invalid_argument(path + ": an http(s) server takes no uploads: run `hpctrain data index` "
                                    "where the shards are served from, on their files");
    }
  }
  fs.will_read(paths);
  std::uint64_t members = 0;
  for (const auto& path : paths) {
    if (data::is_toc_path(path)) continue;
    auto file = fs.open_read(path);
    const data::ShardToc toc = data::make_toc(*file, data::is_tfrecord_path(path));
    auto out = fs.open_write(data::toc_path(path));
    out->append(data::format_toc(toc));
    out->commit();
    members += toc.members.size();
    std::printf("%s: %zu %s\n", data::toc_path(path).c_str(), toc.members.size(),
                toc.tfrecord ? "records" : "members");
  }
  std::printf("indexed %zu shards (%llu members)\n", paths.size(), static_cast<unsigned long long>(members));
  return 0;
}

int run_verify(const std::vector<std::string>& items, bool all, const Config& config) {
  auto fsp = data::make_shard_file_system(config, Logger::from_config(config, -1));
  auto& fs = *fsp;
  std::uint64_t shards = 0, failures = 0;
  auto paths = expand(items, fs);
  fs.will_read(paths);
  for (const auto& path : paths) {
    ++shards;
    for (const auto& f : data::verify_shard(fs, path, all)) {
      std::printf("FAIL %s\n", f.c_str());
      ++failures;
      if (!all) return 1;
    }
  }
  if (failures > 0) {
    std::printf("%llu failures in %llu shards\n", static_cast<unsigned long long>(failures),
                static_cast<unsigned long long>(shards));
    return 1;
  }
  std::printf("OK %llu shards\n", static_cast<unsigned long long>(shards));
  return 0;
}

struct ServeArgs {
  std::vector<std::string> shards;
  std::string listen = "127.0.0.1:0";
  std::string secret_file;
  bool decode = false;
  std::string on_error;
  double duration_s = 0;
};

std::string read_secret(const Config& config, const std::string& secret_file) {
  if (config.secret_fd >= 0) return store::read_secret_from_fd(static_cast<int>(config.secret_fd));
  if (secret_file.empty()) {
    throw_invalid_argument("data serve needs the job secret: run it under hpctrain launch "
                           "(HPCT_SECRET_FD) or pass --secret-file FILE");
  }
  std::ifstream in(secret_file);
  if (!in) throw_io("open " + secret_file, errno);
  std::string s;
  std::getline(in, s);
  if (s.empty()) throw_invalid_argument("--secret-file " + secret_file + " is empty");
  return s;
}

int run_serve(const ServeArgs& a, const Config& config) {
  data::DataServerOptions o;
  auto fs = data::make_shard_file_system(config, Logger::from_config(config, -1));
  o.fs = fs;
  o.shards = expand(a.shards, *fs);
  o.secret = read_secret(config, a.secret_file);
  const size_t colon = a.listen.rfind(':');
  if (colon == std::string::npos) throw_invalid_argument("--listen " + a.listen + ": expected ADDR:PORT");
  o.bind_address = a.listen.substr(0, colon);
  if (o.bind_address.size() > 2 && o.bind_address.front() == '[') {
    o.bind_address = o.bind_address.substr(1, o.bind_address.size() - 2);
  }
  o.port = std::stoi(a.listen.substr(colon + 1));
  o.decode = a.decode;
  o.on_error = data::parse_on_error(a.on_error.empty() ? config.data_on_error : a.on_error);
  o.max_frame_bytes = static_cast<size_t>(config.max_frame_bytes);
  o.logger = Logger::from_config(config, -1);
  // A handler, not a blocked mask: libraries may have started threads before
  // main() (libtorch does), and a process-directed SIGTERM can land on one of
  // them, where a mask set here would not apply and the default would kill us
  // without the closing line.
  install_stop_handlers();
  data::DataServer server(o);
  std::printf("serving %llu samples from %zu shards on %s:%d%s\n",
              static_cast<unsigned long long>(server.index().size()), o.shards.size(),
              o.bind_address.c_str(), server.port(), o.decode ? " (decoded)" : "");
  std::fflush(stdout);
  const Deadline deadline(seconds_to_millis(a.duration_s > 0 ? a.duration_s : 1e9));
  while (!deadline.expired() && g_stop_requested == 0) {
    std::this_thread::sleep_for(Millis(50));
  }
  auto s = server.stats();
  std::printf("data server stopping: %llu streams, %llu finished, %llu samples sent\n",
              static_cast<unsigned long long>(s.streams_opened),
              static_cast<unsigned long long>(s.streams_finished),
              static_cast<unsigned long long>(s.samples_sent));
  return 0;
}

}  // namespace

void add_data_command(CLI::App& app, Cli& cli) {
  auto* data = app.add_subcommand("data", "Pack, inspect, verify and serve WebDataset shards and TFRecord files");
  data->require_subcommand(1);

  auto pack = std::make_shared<PackArgs>();
  auto* p = data->add_subcommand("pack", "Write a dataset as tar shards (WebDataset layout) or TFRecord files");
  p->add_option("--from", pack->from, "fashion-mnist, or folder DIR (DIR/<class>/<image>)")
      ->required()
      ->expected(1, 2);
  p->add_option("--split", pack->split, "fashion-mnist: train or test")->capture_default_str();
  p->add_option("--dir", pack->dir, "fashion-mnist: where the idx files are")->capture_default_str();
  p->add_option("-o,--output", pack->output,
                "Shard name pattern, e.g. 'out/train-%06d.tar' or 'out/train-%05d.tfrecord'")
      ->required();
  p->add_option("--format", pack->format,
                "tar (WebDataset) or tfrecord (tf.train.Example records); default: from -o's extension");
  p->add_option("--max-count", pack->max_count, "Samples per shard")->capture_default_str();
  p->add_option("--max-size", pack->max_size, "Bytes per shard (4K, 256M, 1G)")->capture_default_str();
  p->add_option("--image-format", pack->image_format, "fashion-mnist: png (lossless) or jpg")
      ->capture_default_str();
  p->add_option("--shuffle-seed", pack->shuffle_seed, "folder: shuffle files with this seed (-1: sorted)")
      ->capture_default_str();
  p->add_flag("-q,--quiet", pack->quiet, "No progress bar");
  p->add_flag("--no-index", pack->no_index,
              "Write no sidecar index (<shard>.idx) beside each shard; readers of a bucket then "
              "download each shard before its first sample");
  auto pack_flags = std::make_shared<SourceFlags>();
  add_source_flags(p, pack_flags.get());
  p->callback([pack, pack_flags, &cli] {
    cli.run = [pack, pack_flags, &cli] {
      apply_source_flags(*pack_flags, &cli.config);
      return run_pack(*pack, cli.config);
    };
  });

  auto inspect = std::make_shared<std::pair<std::vector<std::string>, bool>>();
  auto* i = data->add_subcommand("inspect", "Samples, fields and sizes of shards");
  i->add_option("shards", inspect->first, "Shards, patterns ('a-{000..009}.tar') or @list")->required();
  i->add_flag("--json", inspect->second, "One JSON line per shard");
  auto inspect_flags = std::make_shared<SourceFlags>();
  add_source_flags(i, inspect_flags.get());
  i->callback([inspect, inspect_flags, &cli] {
    cli.run = [inspect, inspect_flags, &cli] {
      apply_source_flags(*inspect_flags, &cli.config);
      return run_inspect(inspect->first, inspect->second, cli.config);
    };
  });

  auto index = std::make_shared<std::vector<std::string>>();
  auto* x = data->add_subcommand(
      "index", "Write each shard's sidecar index (<shard>.idx), so a job reading them from a bucket "
               "starts before they are downloaded");
  x->add_option("shards", *index, "Shards, patterns or @list (local files or s3://)")->required();
  auto index_flags = std::make_shared<SourceFlags>();
  add_source_flags(x, index_flags.get());
  x->callback([index, index_flags, &cli] {
    cli.run = [index, index_flags, &cli] {
      apply_source_flags(*index_flags, &cli.config);
      return run_index(*index, cli.config);
    };
  });

  auto verify = std::make_shared<std::pair<std::vector<std::string>, bool>>();
  auto* v = data->add_subcommand("verify", "Read every member and decode every image; exit 1 on damage");
  v->add_option("shards", verify->first, "Shards, patterns or @list")->required();
  v->add_flag("--all", verify->second, "Report every failure, not only the first");
  auto verify_flags = std::make_shared<SourceFlags>();
  add_source_flags(v, verify_flags.get());
  v->callback([verify, verify_flags, &cli] {
    cli.run = [verify, verify_flags, &cli] {
      apply_source_flags(*verify_flags, &cli.config);
      return run_verify(verify->first, verify->second, cli.config);
    };
  });

  auto serve = std::make_shared<ServeArgs>();
  auto* s = data->add_subcommand("serve", "Stream samples to a job's ranks over TCP (authenticated)");
  s->add_option("shards", serve->shards, "Shards, patterns or @list")->required();
  s->add_option("--listen", serve->listen, "ADDR:PORT to bind (port 0: any free port)")->capture_default_str();
  s->add_option("--secret-file", serve->secret_file,
                "File holding the job secret (under hpctrain launch: HPCT_SECRET_FD instead)");
  s->add_flag("--decode", serve->decode, "Send decoded images and labels instead of raw fields");
  s->add_option("--on-error", serve->on_error, "fail or skip damaged shards (default HPCT_DATA_ON_ERROR)");
  s->add_option("--duration-s", serve->duration_s, "Stop after this many seconds (default: until SIGINT/SIGTERM)");
  auto serve_flags = std::make_shared<SourceFlags>();
  add_source_flags(s, serve_flags.get());
  s->callback([serve, serve_flags, &cli] {
    cli.run = [serve, serve_flags, &cli] {
      apply_source_flags(*serve_flags, &cli.config);
      return run_serve(*serve, cli.config);
    };
  });
}

}  // namespace hpct::cli
