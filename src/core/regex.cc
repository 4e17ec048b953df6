#include "core/regex.h"

#include <regex>

#include "core/error.h"

namespace hpct {

struct Regex::Impl {
  std::regex re;
};

namespace {

RegexMatch to_match(const std::smatch& m) {
  RegexMatch out;
  out.position = static_cast<size_t>(m.position(0));
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].matched) {
      out.groups.emplace_back(m[i].str());
    } else {
      out.groups.emplace_back(std::nullopt);
    }
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  try {
    impl_->re = std::regex(pattern);
  } catch (const std::regex_error& e) {
    throw_invalid_argument("regular expression '" + pattern + "' is not valid: " + e.what());
  }
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::optional<RegexMatch> Regex::search(const std::string& text) const {
  std::smatch m;
  if (!std::regex_search(text, m, impl_->re)) return std::nullopt;
  return to_match(m);
}

std::vector<RegexMatch> Regex::search_all(const std::string& text) const {
  std::vector<RegexMatch> out;
  for (std::sregex_iterator it(text.begin(), text.end(), impl_->re), end; it != end; ++it) {
    out.push_back(to_match(*it));
  }
  return out;
}

bool Regex::matches(const std::string& text) const { return std::regex_match(text, impl_->re); }

}  // namespace hpct
