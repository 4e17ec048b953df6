// Environment variables behind an interface, so tests can give each in-process
// rank its own environment and so nothing else in hpctrain calls getenv.
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <string>

namespace hpct {

class Env {
 public:
  virtual ~Env() = default;
  virtual std::optional<std::string> get(const std::string& name) const = 0;
  // Every variable whose name starts with prefix (for catching HPCT_ typos).
  virtual std::map<std::string, std::string> with_prefix(const std::string& prefix) const = 0;
};

// The real process environment. Reads environ on every call; thread-safe as
// long as nobody calls setenv concurrently.
class ProcessEnv final : public Env {
 public:
  std::optional<std::string> get(const std::string& name) const override;
  std::map<std::string, std::string> with_prefix(const std::string& prefix) const override;
};

// A fixed map, for tests and for ranks that live as threads in one process.
class MapEnv final : public Env {
 public:
  MapEnv() = default;
  explicit MapEnv(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}
  MapEnv(std::initializer_list<std::pair<const std::string, std::string>> vars) : vars_(vars) {}
  void set(const std::string& name, const std::string& value) { vars_[name] = value; }
  std::optional<std::string> get(const std::string& name) const override;
  std::map<std::string, std::string> with_prefix(const std::string& prefix) const override;

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace hpct
