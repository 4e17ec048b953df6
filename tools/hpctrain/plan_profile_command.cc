// `hpctrain-torch plan-profile` (hidden): the 1-rank model profile of
// `hpctrain plan calibrate` (plan/profile.h), written as the calibration
// file's "profile" object. It lives here because it needs libtorch.
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "plan/calibration.h"
#include "plan/profile.h"

namespace hpct::cli {

void add_plan_profile_command(CLI::App& app, Cli& cli) {
  auto o = std::make_shared<plan::ProfileOptions>();
  auto out = std::make_shared<std::string>();
  auto* c = app.add_subcommand("plan-profile",
                               "Internal: hpctrain plan calibrate's 1-rank model profile");
  c->group("");
  c->add_option("--model", o->model);
  c->add_option("--batch", o->batch);
  c->add_option("--threads", o->threads);
  c->add_option("--steps", o->steps);
  c->add_option("--out", *out)->required();
  c->callback([&cli, o, out] {
    cli.run = [o, out] {
      plan::Calibration cal;
      cal.profile = plan::profile_model(*o);
      std::ofstream f(*out);
      if (!(f << plan::to_json(cal)["profile"].dump(1) << '\n') || !f.flush())
        throw_io("write " + *out, errno ? errno : EIO);
      return 0;
    };
  });
}

}  // namespace hpct::cli
