// Regular expressions behind a small interface, so that std::regex's
// templates are instantiated in one translation unit (regex.cc): they cost
// 10-30 s of compile time in every file that uses them.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hpct {

struct RegexMatch {
  size_t position = 0;  // of the whole match in the text
  // [0] the whole match, [i] capture group i; nullopt where a group took no part.
  std::vector<std::optional<std::string>> groups;
  // Group i's text, or "" where it took no part.
  std::string group(size_t i) const { return i < groups.size() && groups[i] ? *groups[i] : std::string(); }
};

// An ECMAScript pattern (std::regex's default grammar).
class Regex {
 public:
  explicit Regex(const std::string& pattern);  // InvalidArgument on a bad pattern
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // The first match in text, if any.
  std::optional<RegexMatch> search(const std::string& text) const;
  // Every match in text, left to right, not overlapping.
  std::vector<RegexMatch> search_all(const std::string& text) const;
  // Whether the whole text matches.
  bool matches(const std::string& text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpct
