#include "launch/spawner.h"

namespace hpct::launch {

std::vector<std::string> wrapper_command(const JobLayout& job, const std::string& spec_file) {
  std::vector<std::string> argv = {job.wrapper, "launch-rank"};
  if (!spec_file.empty()) {
    argv.push_back("--spec-file");
    argv.push_back(spec_file);
  }
  return argv;
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-./=:,+@%") == std::string::npos) {
    return word;
  }
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

}  // namespace hpct::launch
