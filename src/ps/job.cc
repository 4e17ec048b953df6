#include "ps/job.h"

#include <unistd.h>

#include <cstdlib>

#include "core/error.h"
#include "store/secret.h"
#include "store/tcp_store.h"

namespace hpct::ps {
namespace {

int int_var(const Env& env, const char* name, int fallback) {
  auto v = env.get(name);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  long n = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0') throw_invalid_argument(std::string(name) + "=" + *v + " is not an integer");
  return static_cast<int>(n);
}

}  // namespace

JobRole job_role(const Env& env) {
  JobRole r;
  r.server = env.get("HPCT_PS_ROLE").value_or("") == "server";
  r.servers = int_var(env, "HPCT_PS_SERVERS", 0);
  r.server_rank = int_var(env, "HPCT_PS_SERVER_RANK", -1);
  r.workers = int_var(env, "HPCT_PS_WORKERS", 0);
  r.host = env.get("HPCT_HOSTNAME").value_or("");
  if (r.host.empty()) {
    char buf[256] = {};
    r.host = ::gethostname(buf, sizeof buf - 1) == 0 ? buf : "?";
  }
  return r;
}

std::shared_ptr<store::Store> open_job_store(const Config& config, const Env& env,
                                             std::string* secret) {
  if (config.store_addr.empty() || config.secret_fd < 0) {
    throw_invalid_argument("parameter servers meet their workers through the job store: start the "
                           "job with `hpctrain launch --servers K` (HPCT_STORE_ADDR and "
                           "HPCT_SECRET_FD are not set)");
  }
  const std::string& text = config.store_addr;
  auto colon = text.rfind(':');
  if (colon == std::string::npos) throw_invalid_argument("HPCT_STORE_ADDR=" + text + " is not host:port");
  store::TcpStoreOptions o;
  o.host = text.substr(0, colon);
  if (o.host.size() > 2 && o.host.front() == '[') o.host = o.host.substr(1, o.host.size() - 2);
  o.port = std::atoi(text.c_str() + colon + 1);
  *secret = store::job_secret(static_cast<int>(config.secret_fd));
  o.secret = *secret;
  o.connect_timeout = seconds_to_millis(config.timeout_s);
  o.max_frame_bytes = static_cast<size_t>(config.max_frame_bytes);
  auto base = std::make_shared<store::TcpStore>(o);
  std::string job = env.get("HPCT_JOB_ID").value_or("job");
  std::string restart = env.get("HPCT_RESTART").value_or("0");
  return std::make_shared<store::PrefixStore>(job + "/restart" + restart + "/ps", base);
}

void publish_server(store::Store& store, int server_rank, const std::string& host,
                    const std::string& address, int port) {
  store.set("server/" + std::to_string(server_rank), host + " " + address + ":" + std::to_string(port));
}

std::vector<ServerAddress> find_servers(store::Store& store, int servers, Millis timeout) {
  std::vector<std::string> keys;
  for (int s = 0; s < servers; ++s) keys.push_back("server/" + std::to_string(s));
  try {
    store.wait(keys, timeout);
  } catch (const Error& e) {
    throw Error(e.code(), std::string("the parameter servers did not all publish their address "
                                      "(did `hpctrain launch --servers` start them?): ") + e.what());
  }
  std::vector<ServerAddress> out;
  for (int s = 0; s < servers; ++s) {
    std::string v = store.get(keys[static_cast<size_t>(s)], timeout);
    auto sp = v.find(' ');
    auto colon = v.rfind(':');
    if (sp == std::string::npos || colon == std::string::npos || colon < sp) {
      throw Error(ErrorCode::kDataCorrupt, "parameter server " + std::to_string(s) +
                                               " published a malformed address: " + v);
    }
    ServerAddress a;
    a.rank = s;
    a.host_name = v.substr(0, sp);
    a.address = v.substr(sp + 1, colon - sp - 1);
    a.port = std::atoi(v.c_str() + colon + 1);
    out.push_back(a);
  }
  return out;
}

Mode parse_sync_mode(const std::string& sync) {
  if (sync == "ps") return Mode::kSync;
  if (sync == "ps-async") return Mode::kAsync;
  throw_invalid_argument("--sync " + sync + ": choose allreduce, ps or ps-async");
}

}  // namespace hpct::ps
