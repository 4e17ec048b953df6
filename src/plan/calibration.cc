#include "plan/calibration.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/stats.h"

namespace hpct::plan {
namespace {

using nlohmann::json;

// A number from text with a unit suffix (case-insensitive), the unit's
// factor from `units`; InvalidArgument with `example` otherwise.
double parse_with_unit(const std::string& text,
                       const std::vector<std::pair<std::string, double>>& units,
                       const std::string& what, const std::string& example) {
  std::string t;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c)))
      t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used > 0 && std::isfinite(v) && v > 0) {
    const std::string unit = t.substr(used);
    for (const auto& [name, factor] : units) {
      if (unit == name) return v * factor;
    }
  }
  throw_invalid_argument(what + " '" + text +
                         "' is not understood; give a positive number with a unit, e.g. " +
                         example);
}

double number(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) {
    throw_invalid_argument("calibration: " + where + "." + key + " is missing or not a number");
  }
  return j[key].get<double>();
}

const json& object(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_object()) {
    throw_invalid_argument("calibration: " + where + (where.empty() ? "" : ".") + key +
                           " is missing or not an object");
  }
  return j[key];
}

}  // namespace

double Profile::gradient_bytes() const {
  double s = 0;
  for (const auto& g : gradients) s += g.bytes;
  return s;
}

const AlphaBeta& Calibration::algorithm(const std::string& name) const {
  auto it = algorithms.find(name);
  if (it == algorithms.end()) {
    throw_invalid_argument("the calibration has no '" + name + "' algorithm; calibrate it (" +
                           (name == "shm"
                                ? std::string("hpctrain plan calibrate with --np 2 on one host")
                                : std::string("hpctrain plan calibrate -H host1:1,host2:1")) +
                           ") or give --link and --latency");
  }
  return it->second;
}

json to_json(const Calibration& c) {
  json grads = json::array();
  for (const auto& g : c.profile.gradients)
    grads.push_back({{"name", g.name}, {"bytes", g.bytes}, {"ready_s", g.ready_s}});
  json algs = json::object();
  for (const auto& [name, a] : c.algorithms) {
    algs[name] = {{"alpha_s", a.alpha_s},
                  {"beta_s_per_byte", a.beta_s_per_byte},
                  {"ranks", a.ranks},
                  {"source", a.source}};
  }
  const auto& p = c.profile;
  return {{"hpctrain_plan_calibration", 1},
          {"profile",
           {{"model", p.model},
            {"batch", p.batch},
            {"forward_s", p.forward_s},
            {"backward_s", p.backward_s},
            {"optimizer_s", p.optimizer_s},
            {"data_s", p.data_s},
            {"gradients", grads}}},
          {"algorithms", algs},
          {"engine",
           {{"fusion_bytes", c.engine.fusion_bytes},
            {"cycle_s", c.engine.cycle_s},
            {"direct_bytes", c.engine.direct_bytes},
            {"ps_piece_bytes", c.engine.ps_piece_bytes},
            {"cast_s_per_byte", c.engine.cast_s_per_byte}}},
          {"host",
           {{"cores", c.host.cores},
            {"threads_per_rank", c.host.threads_per_rank},
            {"shared_cores", c.host.shared_cores},
            {"busy_factor", c.host.busy_factor}}}};
}

Calibration calibration_from_json(const json& j) {
  if (!j.is_object() || !j.contains("hpctrain_plan_calibration")) {
    throw_invalid_argument(
        "not a calibration file (no \"hpctrain_plan_calibration\" field); make one with hpctrain "
        "plan calibrate --save FILE");
  }
  if (j["hpctrain_plan_calibration"] != 1) {
    throw_invalid_argument("calibration version " + j["hpctrain_plan_calibration"].dump() +
                           " is not supported (this hpctrain reads version 1); calibrate again");
  }
  Calibration c;
  const json& p = object(j, "profile", "");
  if (!p.contains("model") || !p["model"].is_string())
    throw_invalid_argument("calibration: profile.model is missing or not a string");
  c.profile.model = p["model"].get<std::string>();
  c.profile.batch = static_cast<int>(number(p, "batch", "profile"));
  c.profile.forward_s = number(p, "forward_s", "profile");
  c.profile.backward_s = number(p, "backward_s", "profile");
  c.profile.optimizer_s = number(p, "optimizer_s", "profile");
  c.profile.data_s = number(p, "data_s", "profile");
  if (!p.contains("gradients") || !p["gradients"].is_array()) {
    throw_invalid_argument("calibration: profile.gradients is missing or not an array");
  }
  for (size_t i = 0; i < p["gradients"].size(); ++i) {
    const json& g = p["gradients"][i];
    const std::string where = "profile.gradients[" + std::to_string(i) + "]";
    c.profile.gradients.push_back(
        {g.value("name", ""), number(g, "bytes", where), number(g, "ready_s", where)});
  }
  for (const auto& [name, a] : object(j, "algorithms", "").items()) {
    const std::string where = "algorithms." + name;
    AlphaBeta ab;
    ab.alpha_s = number(a, "alpha_s", where);
    ab.beta_s_per_byte = number(a, "beta_s_per_byte", where);
    ab.ranks = static_cast<int>(number(a, "ranks", where));
    ab.source = a.value("source", "");
    c.algorithms[name] = ab;
  }
  const json& e = object(j, "engine", "");
  c.engine.fusion_bytes = number(e, "fusion_bytes", "engine");
  c.engine.cycle_s = number(e, "cycle_s", "engine");
  c.engine.direct_bytes = number(e, "direct_bytes", "engine");
  c.engine.ps_piece_bytes = number(e, "ps_piece_bytes", "engine");
  c.engine.cast_s_per_byte = number(e, "cast_s_per_byte", "engine");
  const json& h = object(j, "host", "");
  c.host.cores = static_cast<int>(number(h, "cores", "host"));
  c.host.threads_per_rank = static_cast<int>(number(h, "threads_per_rank", "host"));
  c.host.shared_cores = static_cast<int>(number(h, "shared_cores", "host"));
  if (h.contains("busy_factor")) c.host.busy_factor = number(h, "busy_factor", "host");
  if (!(c.host.busy_factor > 0)) {
    throw_invalid_argument("calibration: host.busy_factor must be above 0 (1: not measured)");
  }
  if (c.profile.batch < 1 || c.host.cores < 1 || c.host.threads_per_rank < 1) {
    throw_invalid_argument(
        "calibration: profile.batch, host.cores and host.threads_per_rank must be at least 1");
  }
  return c;
}

void save_calibration(const Calibration& c, const std::string& path) {
  std::ofstream f(path);
  if (!(f << to_json(c).dump(2) << '\n') || !f.flush())
    throw_io("write calibration " + path, errno ? errno : EIO);
}

Calibration load_calibration(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw_io("read calibration " + path, errno ? errno : ENOENT);
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    throw_invalid_argument("calibration " + path + " is not JSON (" + e.what() +
                           "); make it with hpctrain plan calibrate --save");
  }
  try {
    return calibration_from_json(j);
  } catch (const Error& e) {
    throw_invalid_argument(path + ": " + e.what());
  }
}

namespace {
// `hpctrain bench train`'s result line of a 1-rank job.
bool is_one_rank_bench_train(const json& l) {
  return l.is_object() && l.value("bench", "") == "train" && l.contains("np") &&
         l["np"].is_number() && l["np"].get<int>() == 1;
}
}  // namespace

Profile with_measured_step(Profile p, const json& line) {
  const std::string where = "the bench train line";
  if (!is_one_rank_bench_train(line)) {
    throw_invalid_argument(where +
                           " is not a 1-rank `hpctrain bench train` result (\"bench\": \"train\", "
                           "\"np\": 1); run bench train --np 1 (or --np 1,N)");
  }
  const json& split = object(line, "split_ms_mean", where);
  const double data = number(split, "data", where + "'s split_ms_mean") * 1e-3;
  const double compute = number(split, "compute", where + "'s split_ms_mean") * 1e-3;
  const double optimizer = number(split, "optimizer", where + "'s split_ms_mean") * 1e-3;
  if (!(compute > 0) || data < 0 || optimizer < 0) {
    throw_invalid_argument(where + ": split_ms_mean needs compute > 0 and data, optimizer >= 0");
  }
  if (line.contains("batch_per_rank") && line["batch_per_rank"].is_number()) {
    const int batch = line["batch_per_rank"].get<int>();
    if (batch != p.batch) {
      throw_invalid_argument(where + " trained a batch of " + std::to_string(batch) +
                             " per rank, the profile " + std::to_string(p.batch) +
                             "; use the same --batch for both");
    }
  }
  const double profiled = p.forward_s + p.backward_s;
  const double f = profiled > 0 ? compute / profiled : 0;
  if (profiled > 0) {
    p.forward_s *= f;
    p.backward_s *= f;
    for (auto& g : p.gradients) g.ready_s *= f;
  } else {
    p.forward_s = compute / 3;  // as given values split it: backward is two thirds
    p.backward_s = compute - p.forward_s;
  }
  p.data_s = data;
  p.optimizer_s = optimizer;
  return p;
}

const json& one_rank_bench_train_line(const std::vector<json>& lines, const std::string& where) {
  for (const auto& l : lines) {
    if (is_one_rank_bench_train(l)) return l;
  }
  throw_invalid_argument(where +
                         " holds no 1-rank `hpctrain bench train` line; run bench train with "
                         "--np 1 (or --np 1,N: the 1-rank job in turns with the N-rank one)");
}

double all_cores_factor(const std::vector<json>& lines, int cores, int threads_per_rank,
                        const std::string& where) {
  if (cores < 1 || threads_per_rank < 1) {
    throw_invalid_argument("all-cores factor: cores and threads per rank must be at least 1");
  }
  auto step_ms = [&](const json& l) {
    const json& split = object(l, "split_ms_mean", where);
    const std::string at = where + "'s split_ms_mean";
    return number(split, "data", at) + number(split, "compute", at) +
           number(split, "optimizer", at);
  };
  const double alone = step_ms(one_rank_bench_train_line(lines, where));
  if (!(alone > 0)) throw_invalid_argument(where + ": the 1-rank line's step is 0");
  const json* full = nullptr;
  int np = 0;
  for (const auto& l : lines) {
    if (!l.is_object() || l.value("bench", "") != "train" || !l.contains("np") ||
        !l["np"].is_number())
      continue;
    const int n = l["np"].get<int>();
    if (n >= 2 && n * threads_per_rank >= cores && (full == nullptr || n < np)) full = &l, np = n;
  }
  if (full == nullptr) {
    throw_invalid_argument(where + " holds no bench train line whose ranks fill the host's " +
                           std::to_string(cores) + " cores (np x " +
                           std::to_string(threads_per_rank) +
                           " thread >= " + std::to_string(cores) + "); run bench train --np 1," +
                           std::to_string((cores + threads_per_rank - 1) / threads_per_rank) +
                           " with all ranks on one host");
  }
  const double share = static_cast<double>(np) * threads_per_rank / cores;
  return step_ms(*full) / alone / share;
}

AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& pts_in) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& p : pts_in) {
    if (p.first >= 0 && p.second > 0) pts.push_back(p);
  }
  std::sort(pts.begin(), pts.end());
  if (pts.size() < 2 || pts.front().first == pts.back().first) {
    throw_invalid_argument(
        "an alpha-beta fit needs times at two or more message sizes (bench comm --sizes "
        "4K,1M,16M)");
  }
  // beta from the bandwidth regime: least squares over the sizes from a
  // sixteenth of the largest up (at least the two largest). Small messages
  // ride in caches and in a shaper's burst and would make a link look
  // faster than it is for the megabytes a gradient bucket holds.
  const double largest = pts.back().first;
  size_t from = pts.size() - 2;
  while (from > 0 && pts[from - 1].first >= largest / 16) --from;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = from; i < pts.size(); ++i) {
    const auto [x, y] = pts[i];
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  AlphaBeta ab;
  const double det = n * sxx - sx * sx;
  ab.beta_s_per_byte = det > 0 ? (n * sxy - sx * sy) / det : 0;
  if (ab.beta_s_per_byte <= 0)
    ab.beta_s_per_byte = sxy / sxx;  // no slope visible: through the origin
  // alpha from the latency regime: what the smallest message takes beyond its bytes.
  ab.alpha_s = std::max(0.0, pts.front().second - pts.front().first * ab.beta_s_per_byte);
  return ab;
}

std::vector<std::string> fit_bench_comm(const std::vector<json>& lines,
                                        std::map<std::string, AlphaBeta>* into) {
  // name -> bytes -> the times of every run at that size.
  std::map<std::string, std::map<double, std::vector<double>>> runs;
  std::map<std::string, int> ranks;
  for (const auto& j : lines) {
    if (j.value("bench", "") != "comm" || j.value("op", "") != "allreduce" ||
        !j.contains("time_us"))
      continue;
    const double bytes = j.value("bytes", 0.0);
    const int np = j.value("np", 0);
    const std::string alg = j.value("algorithm", "");
    std::string name;
    if (alg.rfind("direct:", 0) == 0 && np == 2)
      name = "direct";
    else if (alg.rfind("shm:", 0) == 0)
      name = "shm";
    if (!name.empty()) {
      runs[name][bytes].push_back(j["time_us"].get<double>() * 1e-6);
      ranks[name] = np;
    }
    // Gloo's own allreduce beside ours on 2 ranks across hosts: the ring.
    if (name == "direct" && j.value("raw_call", "") == "gloo::allreduce" &&
        j.contains("raw_time_us")) {
      runs["ring"][bytes].push_back(j["raw_time_us"].get<double>() * 1e-6);
      ranks["ring"] = np;
    }
  }
  std::vector<std::string> fitted;
  for (const auto& [name, by_size] : runs) {
    if (by_size.size() < 2) continue;
    std::vector<std::pair<double, double>> p;
    size_t most = 0;
    for (const auto& [bytes, times] : by_size) {
      p.push_back({bytes, median(times)});
      most = std::max(most, times.size());
    }
    AlphaBeta ab = fit_alpha_beta(p);
    if (name == "ring") ab.alpha_s /= 2;  // 2 ranks: 2 steps of S/2 bytes
    ab.ranks = ranks[name];
    ab.source = "bench comm, " + std::to_string(p.size()) + " sizes, " + std::to_string(ab.ranks) +
                " ranks" + (most > 1 ? ", median of " + std::to_string(most) + " runs" : "");
    (*into)[name] = ab;
    fitted.push_back(name);
  }
  return fitted;
}

double parse_rate_bytes_per_s(const std::string& text) {
  return parse_with_unit(text,
                         {{"gbit", 1e9 / 8},
                          {"gbit/s", 1e9 / 8},
                          {"gbps", 1e9 / 8},
                          {"mbit", 1e6 / 8},
                          {"mbit/s", 1e6 / 8},
                          {"mbps", 1e6 / 8},
                          {"gb/s", 1e9},
                          {"mb/s", 1e6}},
                         "link rate", "25gbit, 10Gbit/s, 100mbit or 1.25GB/s");
}

double parse_seconds(const std::string& text) {
  return parse_with_unit(text, {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}}, "time",
                         "20us, 1.5ms or 0.002s");
}

}  // namespace hpct::plan
