// A rank program for the planted-fault tests of `hpctrain why`
// (why_fault_test.cc): a training loop's shape (data, forward, backward
// with two gradients allreduced by the engine, optimizer) on the real
// engine and communicator, with one fault planted on one rank at one step:
//   skip:          the rank does not submit grad.b
//   shape:         the rank's grad.b has 11 elements, not 10
//   stop-in-data:  the rank stops itself (SIGSTOP) while loading data, and
//                  stays in its data phase once continued
// Usage: why_fault_rank FAULT FAULT_RANK FAULT_STEP STEPS
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/connect.h"
#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "engine/engine.h"

using namespace hpct;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: why_fault_rank none|skip|shape|stop-in-data FAULT_RANK FAULT_STEP STEPS\n");
    return 2;
  }
  const std::string fault = argv[1];
  const int fault_rank = std::atoi(argv[2]), fault_step = std::atoi(argv[3]), steps = std::atoi(argv[4]);
  try {
    ProcessEnv env;
    Config config = Config::from_env(env);
    comm::World world = comm::connect_world(config, env, Logger::from_config(config, -1));
    const int rank = world.comm->rank();
    engine::Engine e(*world.comm, engine::EngineOptions::from_config(config), Logger::from_config(config, rank));
    auto& record = e.flight_record();
    std::vector<float> a(1000, 1.0f), b(10, 1.0f), b_odd(11, 1.0f);
    for (int step = 0; step < steps; ++step) {
      const bool here = rank == fault_rank && step == fault_step;
      record.set_phase(engine::Phase::kData, step);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // loading a batch
      if (here && fault == "stop-in-data") {
        std::printf("rank %d stops in its data phase at step %d\n", rank, step);
        std::fflush(stdout);
        ::raise(SIGSTOP);
        std::this_thread::sleep_for(std::chrono::seconds(60));  // and the loader stays stuck
      }
      record.set_phase(engine::Phase::kForward, step);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      record.set_phase(engine::Phase::kBackward, step);
      auto ha = e.allreduce_async("grad.a", {a.data(), comm::DataType::kFloat32, {1000}}, comm::ReduceOp::kAvg);
      engine::Handle hb;
      if (here && fault == "shape") {
        hb = e.allreduce_async("grad.b", {b_odd.data(), comm::DataType::kFloat32, {11}}, comm::ReduceOp::kAvg);
      } else if (!(here && fault == "skip")) {
        hb = e.allreduce_async("grad.b", {b.data(), comm::DataType::kFloat32, {10}}, comm::ReduceOp::kAvg);
      }
      ha.wait();
      if (hb.valid()) hb.wait();
      record.set_phase(engine::Phase::kOptimizer, step);
      std::printf("rank %d step %d done\n", rank, step);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& x) {
    std::fprintf(stderr, "why_fault_rank: %s\n", x.what());
    return 1;
  }
}
