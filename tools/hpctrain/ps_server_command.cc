// `hpctrain ps-server`: one parameter server of a job (src/ps/server.h),
// started by `hpctrain launch --servers K` beside the workers (hidden: users
// never start it by hand). It listens on this host's address towards the
// job store, publishes it (src/ps/job.h) and serves until every worker has
// said Bye or died.
#include <unistd.h>

#include "commands.h"
#include "comm/connect.h"
#include "core/error.h"
#include "core/log.h"
#include "ps/job.h"
#include "ps/server.h"

namespace hpct::cli {

void add_ps_server_command(CLI::App& app, Cli& cli) {
  auto* c = app.add_subcommand("ps-server", "Internal: a parameter server that hpctrain launch --servers starts");
  c->group("");
  c->callback([&cli] {
    cli.run = [&cli] {
      ProcessEnv env;
      ps::JobRole role = ps::job_role(env);
      if (!role.server || role.server_rank < 0 || role.workers < 1) {
        throw_invalid_argument("ps-server runs under `hpctrain launch --servers K`, which sets "
                               "HPCT_PS_ROLE, HPCT_PS_SERVER_RANK and HPCT_PS_WORKERS");
      }
      Logger log = Logger::from_config(cli.config, role.server_rank);
      std::string secret;
      auto store = ps::open_job_store(cli.config, env, &secret);
      ps::ServerOptions o;
      o.rank = role.server_rank;
      o.num_workers = role.workers;
      o.secret = secret;
      o.host_name = role.host;
      o.mac_frames = cli.config.ps_frame_mac;
      // Where the workers reach us: the address this host uses towards the
      // store (the launcher's host), unless the job names an address.
      std::string store_host = cli.config.store_addr.substr(0, cli.config.store_addr.rfind(':'));
      o.bind_address = !cli.config.bind_address.empty() ? cli.config.bind_address
                                                         : comm::local_address_towards(store_host);
      o.idle_timeout = seconds_to_millis(cli.config.timeout_s);
      o.logger = log;
      ps::Server server(o);
      ps::publish_server(*store, o.rank, o.host_name, o.bind_address, server.port());
      log.info("ps", "parameter server " + std::to_string(o.rank) + " on " + o.host_name + " (" +
                         o.bind_address + ":" + std::to_string(server.port()) + ") for " +
                         std::to_string(o.num_workers) + " workers, pid " + std::to_string(::getpid()));
      ps::ServerSummary s = server.run();
      log.info("ps", "parameter server " + std::to_string(o.rank) + " done: " + std::to_string(s.pushes) +
                         " pushes, " + std::to_string(s.bytes_in) + " bytes in, " +
                         std::to_string(s.epochs) + " epoch turns, " + std::to_string(s.workers_died) +
                         " workers died");
      return 0;
    };
  });
}

}  // namespace hpct::cli
