#include "launch/torchrun_env.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.h"
#include "core/fd.h"

namespace hpct::launch {

void add_torchrun_master_env(std::map<std::string, std::string>& env,
                             const std::vector<RankPlacement>& ranks, bool all_local, int port) {
  if (env.count("MASTER_ADDR") == 0) {
    if (all_local) {
      env["MASTER_ADDR"] = "127.0.0.1";
    } else if (!ranks.empty()) {
      env["MASTER_ADDR"] = ranks.front().host;
    }
  }
  if (env.count("MASTER_PORT") == 0) env["MASTER_PORT"] = std::to_string(port);
}

void add_torchrun_rank_env(std::map<std::string, std::string>& env, const RankPlacement& p, int size) {
  env["RANK"] = std::to_string(p.rank);
  env["WORLD_SIZE"] = std::to_string(size);
  env["LOCAL_RANK"] = std::to_string(p.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(p.local_size);
  env["HOROVOD_RANK"] = std::to_string(p.rank);
  env["HOROVOD_SIZE"] = std::to_string(size);
  env["HOROVOD_LOCAL_RANK"] = std::to_string(p.local_rank);
  env["HOROVOD_LOCAL_SIZE"] = std::to_string(p.local_size);
  env["HOROVOD_CROSS_RANK"] = std::to_string(p.cross_rank);
  env["HOROVOD_CROSS_SIZE"] = std::to_string(p.cross_size);
  env["HOROVOD_HOSTNAME"] = p.host;
}

int pick_free_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_io("socket for MASTER_PORT", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw_io("bind 127.0.0.1:0 for MASTER_PORT", errno);
  }
  socklen_t len = sizeof a;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw_io("getsockname for MASTER_PORT", errno);
  }
  return ntohs(a.sin_port);
}

}  // namespace hpct::launch
