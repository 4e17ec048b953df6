// Table and JSON rendering hold the same verdicts.
#include <gtest/gtest.h>

#include "doctor/render.h"

namespace hpct::doctor {
namespace {

Report sample() {
  Report r;
  r.hosts = {"h1", "h2"};
  r.columns = {"ssh", "ports"};
  r.ports = "29500-29501";
  r.rows = {{{"h1"}, "ssh", Status::kOk, "BatchMode login", ""},
            {{"h2"}, "ssh", Status::kFail, "connection refused", "start sshd on h2"},
            {{"h1", "h2"}, "ports", Status::kSkip, "not tested", ""},
            {{"h2", "h1"}, "ports", Status::kSkip, "not tested", ""}};
  r.elapsed_s = 1.25;
  r.quick = true;
  return r;
}

TEST(DoctorRender, CellsTakeTheWorstRowAndPairsCountForTheirTarget) {
  Report r = sample();
  EXPECT_EQ(cell_mark(r, "h1", "ssh"), "ok");
  EXPECT_EQ(cell_mark(r, "h2", "ssh"), "FAIL");
  EXPECT_EQ(cell_mark(r, "h2", "ports"), "-");
  r.rows.push_back({{"h1", "h2"}, "ports", Status::kFail, "blocked", "open it"});
  EXPECT_EQ(cell_mark(r, "h2", "ports"), "FAIL");
  EXPECT_EQ(cell_mark(r, "h1", "ports"), "-");
  EXPECT_EQ(cell_mark(r, "h1", "nothing"), "-");
}

TEST(DoctorRender, TableHasAMarkPerCellAndAFixLinePerFailure) {
  std::string t = render_table(sample());
  EXPECT_NE(t.find("host  ssh   ports\nh1    ok    -\nh2    FAIL  -\n"), std::string::npos) << t;
  EXPECT_NE(t.find("FAIL h2 ssh: connection refused\n     fix: start sshd on h2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("NOT READY: 2 host(s), 1 failure(s), 0 warning(s), 1.2 s (--quick)"), std::string::npos)
      << t;
  EXPECT_NE(t.find("ports 29500-29501 (from row to column):"), std::string::npos) << t;
}

TEST(DoctorRender, JsonHoldsTheSameVerdictsAsTheTable) {
  Report r = sample();
  nlohmann::json j = nlohmann::json::parse(render_json(r).dump());
  EXPECT_FALSE(j["ready"].get<bool>());
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["cells"]["h2"]["ssh"], "fail");
  EXPECT_EQ(j["cells"]["h1"]["ssh"], "ok");
  EXPECT_EQ(j["cells"]["h1"]["ports"], "skip");
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][1]["fix"], "start sshd on h2");
  for (const auto& h : r.hosts) {
    for (const auto& c : r.columns) {
      std::string m = cell_mark(r, h, c);
      std::string js = j["cells"][h][c];
      EXPECT_EQ(js, m == "FAIL" ? "fail" : m == "-" ? "skip" : m);
    }
  }
}

TEST(DoctorRender, MatricesPrintFromRowToColumn) {
  Report r = sample();
  r.matrices.push_back({"latency_us", "us", {{-1, 70}, {72.5, -1}}});
  std::string t = render_table(r);
  EXPECT_NE(t.find("latency_us (us, from row to column):"), std::string::npos) << t;
  EXPECT_NE(t.find("h1          70.00"), std::string::npos) << t;
  nlohmann::json j = render_json(r);
  EXPECT_TRUE(j["matrices"]["latency_us"]["values"][0][0].is_null());
  EXPECT_DOUBLE_EQ(j["matrices"]["latency_us"]["values"][1][0].get<double>(), 72.5);
}

}  // namespace
}  // namespace hpct::doctor
