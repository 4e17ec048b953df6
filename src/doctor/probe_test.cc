// The probe's pure parts and its protocol, run in-process over pipes against
// itself on loopback: facts, clock, tokens, connects, measurement, clean exit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "doctor/net.h"
#include "doctor/probe.h"

namespace hpct::doctor {
namespace {

TEST(DoctorProbe, ParsesPortRanges) {
  EXPECT_TRUE(parse_port_range("ephemeral").ephemeral());
  auto r = parse_port_range("29500-29510");
  EXPECT_EQ(r.lo, 29500);
  EXPECT_EQ(r.hi, 29510);
  EXPECT_EQ(r.text(), "29500-29510");
  EXPECT_EQ(parse_port_range("80").text(), "80");
  for (const char* bad : {"0", "70000", "10-5", "a-b", "1000-2000", "29500-"}) {
    EXPECT_THROW(parse_port_range(bad), Error) << bad;
  }
}

TEST(DoctorProbe, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  std::string err;
  EXPECT_EQ(resolve_ipv4("127.0.0.1", &err), std::vector<std::string>{"127.0.0.1"});
}

// The build fingerprint covers hpctrain-torch beside hpctrain: a host whose
// torch half differs or is missing is another build.
TEST(DoctorProbe, BuildHashCoversTheTorchSibling) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "hpct-build-hash-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  auto write = [](const fs::path& p, const std::string& text) { std::ofstream(p) << text; };
  write(dir / "hpctrain", "front");
  const std::string alone = build_sha256((dir / "hpctrain").string());
  EXPECT_EQ(alone.size(), 64u);
  write(dir / "hpctrain-torch", "torch A");
  const std::string with_a = build_sha256((dir / "hpctrain").string());
  write(dir / "hpctrain-torch", "torch B");
  const std::string with_b = build_sha256((dir / "hpctrain").string());
  EXPECT_NE(alone, with_a);
  EXPECT_NE(with_a, with_b);
  EXPECT_EQ(with_b, build_sha256((dir / "hpctrain").string()));  // the same files, the same hash
  fs::remove_all(dir);
}

std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

TEST(DoctorProbe, SpeaksItsProtocolOverPipes) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("doctor-probe-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int to_probe[2], from_probe[2];
  ASSERT_EQ(::pipe(to_probe), 0);
  ASSERT_EQ(::pipe(from_probe), 0);
  ProbeOptions o;
  o.listed_name = "127.0.0.1";
  o.index = 0;
  o.run_id = "test";
  o.shared_dir = dir.string();
  o.version = "v";
  o.git = "g";
  o.lifetime_s = 30;
  int rc = -1;
  std::thread t([&] { rc = run_probe(o, to_probe[0], from_probe[1]); });

  auto facts_line = nlohmann::json::parse(read_line(from_probe[0]));
  ASSERT_EQ(facts_line["phase"], "facts");
  HostFacts f = host_facts_from_json(facts_line["facts"]);
  EXPECT_EQ(f.version, "v");
  EXPECT_EQ(f.build_sha256.size(), 64u);
  EXPECT_TRUE(f.token_written) << f.token_error;
  EXPECT_TRUE(fs::exists(token_path(dir.string(), "test", 0)));
  ASSERT_EQ(f.ports.size(), 2u);
  EXPECT_GT(f.cores, 0);

  ASSERT_EQ(::write(to_probe[1], "time\n", 5), 5);
  auto time_line = nlohmann::json::parse(read_line(from_probe[0]));
  EXPECT_GT(time_line["time_ns"].get<long long>(), 0);

  // It checks itself as a peer of index 1 (same token dir, own ports).
  {
    std::FILE* tok = std::fopen(token_path(dir.string(), "test", 1).c_str(), "w");
    std::fputs(token_text("test", 1).c_str(), tok);
    std::fclose(tok);
  }
  nlohmann::json go = {{"peers", {{{"index", 1}, {"name", "127.0.0.1"}, {"ports", {f.ports[0], 1}}}}},
                       {"connect_timeout_s", 1.0}};
  std::string cmd = "go " + go.dump() + "\n";
  ASSERT_EQ(::write(to_probe[1], cmd.data(), cmd.size()), static_cast<ssize_t>(cmd.size()));
  auto pairs = nlohmann::json::parse(read_line(from_probe[0]));
  EXPECT_EQ(pairs["tokens_seen"], nlohmann::json::array({1}));
  ASSERT_EQ(pairs["connects"].size(), 2u);
  EXPECT_TRUE(pairs["connects"][0]["ok"].get<bool>());
  EXPECT_FALSE(pairs["connects"][1]["ok"].get<bool>());  // port 1: nobody listens

  nlohmann::json m = {{"to", 1}, {"name", "127.0.0.1"}, {"port", f.ports[1]}};
  cmd = "measure " + m.dump() + "\n";
  ASSERT_EQ(::write(to_probe[1], cmd.data(), cmd.size()), static_cast<ssize_t>(cmd.size()));
  auto meas = nlohmann::json::parse(read_line(from_probe[0]));
  EXPECT_GT(meas.value("rtt_us", -1.0), 0) << meas.dump();
  EXPECT_GT(meas.value("gbps", -1.0), 0) << meas.dump();

  ::close(to_probe[1]);  // end of stdin: the probe cleans up and returns
  t.join();
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(fs::exists(token_path(dir.string(), "test", 0)));
  ::close(to_probe[0]);
  ::close(from_probe[0]);
  ::close(from_probe[1]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hpct::doctor
