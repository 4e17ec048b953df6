#include "cluster/auto_bundle.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/subprocess.h"

namespace hpct::cluster {
namespace {

bool is_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// "size mtime" of a file or folder; "-" when it is not there.
std::string stamp_of(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return "-";
  return std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

std::string last_lines(const std::string& text, int n) {
  size_t pos = text.size();
  while (pos > 0 && text[pos - 1] == '\n') --pos;
  size_t end = pos;
  for (int i = 0; i < n && pos > 0; ++i) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
  }
  return text.substr(pos == 0 ? 0 : pos + 1, end - (pos == 0 ? 0 : pos + 1));
}

}  // namespace

std::string find_bundle_script(const std::string& playbooks) {
  const std::string source = playbooks + "/../../scripts/package-bundle.sh";
  const std::string installed = playbooks + "/../scripts/package-bundle.sh";
  if (is_file(source)) return source;
  if (is_file(installed)) return installed;
  throw_invalid_argument("--packages bundle: cannot find package-bundle.sh in " + source + " or " + installed +
                         ": make a bundle with it yourself and give --packages bundle:DIR");
}

std::vector<std::string> bundle_command(const SetupOptions& o, const std::vector<std::string>& features,
                                        const std::string& script, const std::string& dir) {
  std::vector<std::string> argv = {"bash", script, dir, "--deb", o.deb};
  for (const auto& f : features) {
    argv.push_back("--for");
    argv.push_back(f);
  }
  return argv;
}

std::string bundle_inputs(const SetupOptions& o, const std::string& script) {
  std::string line = "deb " + o.deb + " " + stamp_of(o.deb);
  // A new script may choose other packages. This machine's apt lists are left out: any
  // apt-get update here would remake the bundle; a bundle is consistent as made.
  line += "; script " + stamp_of(script) + "\n";
  return line;
}

std::vector<std::string> bundle_features(const std::vector<std::string>& wanted,
                                         const std::vector<std::string>& held) {
  std::vector<std::string> all = held;
  for (const auto& f : wanted) {
    if (std::find(all.begin(), all.end(), f) == all.end()) all.push_back(f);
  }
  return all;
}

std::string make_auto_bundle(const SetupOptions& o, const std::string& playbooks, const std::string& state_dir) {
  const std::string script = find_bundle_script(playbooks);
  const std::string dir = state_dir + "/bundle";
  const std::string stamp_file = dir + "/.hpctrain-inputs";
  // The stamp: the inputs line, then "features A B ..." (what the bundle holds).
  const std::string inputs = bundle_inputs(o, script);
  const std::string stamp = read_file_or_empty(stamp_file);
  std::vector<std::string> held;
  bool same_inputs = is_file(dir + "/Packages") && stamp.rfind(inputs, 0) == 0;
  if (same_inputs) {
    std::istringstream rest(stamp.substr(inputs.size()));
    std::string word;
    rest >> word;  // "features"
    while (rest >> word) held.push_back(word);
  }
  const auto features = bundle_features(package_features(o), held);
  if (same_inputs && features.size() == held.size()) {
    std::cout << "packages: the bundle " << dir << " is up to date\n";
    return dir;
  }
  std::remove(stamp_file.c_str());
  auto argv = bundle_command(o, features, script, dir);
  std::cout << "packages: making the bundle " << dir << " (" << join_command(argv) << ")\n" << std::flush;
  auto t0 = std::chrono::steady_clock::now();
  // The script's output goes to a log in the state folder; its last lines are shown.
  const std::string log = state_dir + "/bundle.log";
  std::vector<std::string> logged = {"bash", "-c", "exec \"$0\" \"$@\" > \"$HPCT_BUNDLE_LOG\" 2>&1"};
  logged.insert(logged.end(), argv.begin(), argv.end());
  SubprocessResult r = run_subprocess(logged, {{"HPCT_BUNDLE_LOG", log}}, Millis(900000));
  if (r.timed_out) {
    throw_timeout("package-bundle.sh did not finish within 15 minutes: run `" + join_command(argv) + "` to see why");
  }
  std::string out = read_file_or_empty(log);
  if (r.exit_code != 0 || r.signal != 0) {
    throw_io("making the bundle failed (" + join_command(argv) + ", log " + log + "):\n" + last_lines(out, 8), EIO);
  }
  {
    std::ofstream f(stamp_file, std::ios::trunc);
    f << inputs << "features";
    for (const auto& feature : features) f << " " << feature;
    f << "\n";
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", took);
  std::cout << "packages: " << last_lines(out, 1) << " (" << secs << ")\n";
  return dir;
}

}  // namespace hpct::cluster
