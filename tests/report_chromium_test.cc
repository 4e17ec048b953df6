// `hpctrain report` as a user sees it, in a real browser. A short real run
// (2 ranks under `hpctrain launch --output-dir`, Fashion-MNIST shards,
// --metrics, the engine timeline) with rank 1 killed after the first
// checkpoint, so the launcher restarts the job and it resumes; the report of
// its run directory opened in headless Chromium (Debian's chromium): no
// console message, every chart present, and the points and bars drawn equal
// the metrics file's values; the restart and the fault marked. `bench train`
// output gives the scaling chart (and `bench train --plot` still writes its
// SVG). The screenshots are kept (paths printed). A deliberately broken page
// proves the console check catches script errors and external loads.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_summary_run.h"
#include "fashion_shards.h"
#include "rank_process.h"

namespace {

namespace fs = std::filesystem;
using hpct::test::CliRun;

CliRun run(const std::string& args) { return hpct::test::run_hpctrain(args); }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("{", 0) != 0) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(j);
  }
  return out;
}

// What Chromium made of a page: the DOM after loading, and every console
// message (Chromium logs them at any level as "...:CONSOLE:<line>] "text",
// source: ..." with --enable-logging=stderr --v=0).
struct Browser {
  int exit_code = -1;
  std::string dom;
  std::vector<std::string> console;
  std::string log;
};

Browser open_in_chromium(const std::string& page, const std::string& screenshot = "") {
  Browser b;
  const std::string profile = page + ".chromium-profile";
  const std::string err = page + ".chromium-stderr";
  const std::string base =
      "timeout 60 chromium --headless --no-sandbox --disable-gpu --no-first-run "
      "--user-data-dir='" +
      profile + "' --enable-logging=stderr --v=0 ";
  auto r = hpct::test::run_shell(base + "--dump-dom 'file://" + fs::absolute(page).string() +
                                 "' 2>'" + err + "'");
  b.exit_code = r.exit_code;
  b.dom = r.out;
  b.log = slurp(err);
  if (b.exit_code == 127)
    b.log = "chromium is not installed: run scripts/install-deps.sh (Debian's chromium)\n" + b.log;
  if (b.exit_code == 124) b.log = "chromium did not end within 60 s\n" + b.log;
  std::istringstream lines(b.log);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(":CONSOLE") != std::string::npos) b.console.push_back(line);
  }
  if (!screenshot.empty() && b.exit_code == 0) {
    auto s = hpct::test::run_shell(
        base + "--hide-scrollbars --window-size=1100,3200 --screenshot='" + screenshot +
        "' 'file://" + fs::absolute(page).string() + "' 2>/dev/null");
    if (s.exit_code != 0) b.exit_code = s.exit_code;
  }
  fs::remove_all(profile);
  fs::remove(err);
  return b;
}

// Every element <tag class='cls' ...> of the DOM, as its attributes.
std::vector<std::map<std::string, std::string>> elements(const std::string& dom,
                                                         const std::string& tag,
                                                         const std::string& cls) {
  std::vector<std::map<std::string, std::string>> out;
  const std::regex element("<" + tag + " ([^>]*)>");
  const std::regex attr(R"(([\w-]+)="([^"]*)\")");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), element);
       it != std::sregex_iterator(); ++it) {
    std::map<std::string, std::string> a;
    const std::string inner = (*it)[1].str();
    for (auto at = std::sregex_iterator(inner.begin(), inner.end(), attr);
         at != std::sregex_iterator(); ++at) {
      a[(*at)[1].str()] = (*at)[2].str();
    }
    if (a["class"] == cls) out.push_back(a);
  }
  return out;
}

// The part of the DOM inside <svg ... id='id'> ... </svg>.
std::string svg_by_id(const std::string& dom, const std::string& id) {
  const auto at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const auto start = dom.rfind("<svg", at);
  return dom.substr(start, dom.find("</svg>", at) - start);
}

std::string artifact_dir() {
  fs::create_directories(HPCT_REPORT_ARTIFACT_DIR);
  return HPCT_REPORT_ARTIFACT_DIR;
}

class ReportChromium : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "hpct-report-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string dir_;
};
std::string ReportChromium::dir_;

TEST_F(ReportChromium, ConsoleCheckCatchesAScriptErrorAndAnExternalLoad) {
  // The report's own page policy, with a script error and a stylesheet from the network.
  const std::string page = dir_ + "/broken.html";
  std::ofstream(page)
      << "<!DOCTYPE html><html><head><meta http-equiv='Content-Security-Policy' "
         "content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
         "<link rel='stylesheet' href='https://cdn.example.com/chart.css'></head><body>"
         "<svg class='chart' id='c'></svg><script>drawChart();</script></body></html>";
  Browser b = open_in_chromium(page);
  ASSERT_EQ(b.exit_code, 0) << b.log;
  std::string all;
  for (const auto& c : b.console) all += c + "\n";
  EXPECT_NE(all.find("Uncaught ReferenceError: drawChart is not defined"), std::string::npos)
      << b.log;
  EXPECT_NE(all.find("https://cdn.example.com/chart.css"), std::string::npos) << b.log;
  EXPECT_NE(b.dom.find("id=\"c\""), std::string::npos) << b.dom;
}

TEST_F(ReportChromium, BadInputIsOneLineWithTheFix) {
  std::ofstream(dir_ + "/empty.jsonl").close();
  std::ofstream(dir_ + "/notes.txt") << "not a metrics file\n";
  struct Case {
    std::string arg, expect;
  };
  for (const Case& c : {Case{dir_ + "/missing.jsonl", "missing.jsonl: no such file or directory"},
                        Case{dir_ + "/empty.jsonl", "empty.jsonl is empty"},
                        Case{dir_ + "/notes.txt",
                             "notes.txt: unknown format (first line: 'not a metrics file')"}}) {
    CliRun r = run("report " + c.arg + " -o " + dir_ + "/bad.html");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(fs::exists(dir_ + "/bad.html"));
  }
}

TEST_F(ReportChromium, RestartedTrainingRunShowsItsMetricsAndEvents) {
  const auto shards = hpct::test::FashionShards::in_dir(dir_, 600);
  ASSERT_TRUE(shards.ok()) << shards.output();
  const std::string rundir = dir_ + "/run";
  fs::create_directories(rundir);
  // Rank 1 is killed once the step-10 checkpoint exists; the launcher
  // restarts the job, which resumes from its newest checkpoint.
  std::thread killer([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      if (fs::exists(rundir + "/ckpt/ckpt-0000000010.json")) {
        if (pid_t pid = hpct::test::find_train_rank(rundir + "/ckpt", 1)) {
          ::kill(pid, SIGKILL);
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  CliRun train =
      run("launch -np 2 --max-restarts 1 --output-dir " + rundir +
          " -- env HPCT_TIMELINE=" + rundir + "/timeline.json " + HPCT_BINARY +
          " train --model cnn --data '" + dir_ + "/fm-{000000..000002}.tar' --val " + dir_ +
          "/fm-000003.tar --epochs 1 --batch 32 --lr 0.05 " +
          "--threads 1 --seed 7 --log-every 5 --max-steps 25 --checkpoint-dir " + rundir +
          "/ckpt --checkpoint-every 10 --resume auto --metrics " + rundir + "/metrics.jsonl");
  killer.join();
  ASSERT_EQ(train.exit_code, 0) << train.out;
  ASSERT_NE(train.out.find("restarting the job"), std::string::npos) << train.out;

  const std::string page = dir_ + "/report.html";
  CliRun report = run("report " + rundir + " -o " + page);
  ASSERT_EQ(report.exit_code, 0) << report.out;
  const std::string shot = artifact_dir() + "/report-train.png";
  Browser b = open_in_chromium(page, shot);
  ASSERT_EQ(b.exit_code, 0) << b.log;
  EXPECT_TRUE(b.console.empty()) << b.console.front();
  ASSERT_TRUE(fs::exists(shot) && fs::file_size(shot) > 10000) << shot;
  std::printf("screenshot: %s\n", shot.c_str());
  fs::copy_file(page, artifact_dir() + "/report-train.html", fs::copy_options::overwrite_existing);

  // The charts against the metrics file.
  auto metrics = json_lines(slurp(rundir + "/metrics.jsonl"));
  std::multiset<std::pair<double, double>> throughput, loss, accuracy;
  std::vector<const nlohmann::json*> steps;
  for (const auto& j : metrics) {
    if (j["type"] == "step") {
      throughput.emplace(j["step"].get<double>(), j["samples_per_s"].get<double>());
      loss.emplace(j["step"].get<double>(), j["loss"].get<double>());
      steps.push_back(&j);
    }
    if (j["type"] == "epoch")
      accuracy.emplace(j["step"].get<double>(), j["val_accuracy"].get<double>());
  }
  // 25 steps logged every 5 (the shards hold 28 steps of 2 x 32); the
  // restarted run logs again from its checkpoint's step on.
  ASSERT_GE(steps.size(), 5u) << slurp(rundir + "/metrics.jsonl");
  auto drawn = [&](const std::string& id, const std::string& series_suffix) {
    std::multiset<std::pair<double, double>> pts;
    for (const auto& p : elements(svg_by_id(b.dom, id), "circle", "point")) {
      const std::string& s = p.at("data-series");
      if (s.size() >= series_suffix.size() &&
          s.compare(s.size() - series_suffix.size(), std::string::npos, series_suffix) == 0) {
        pts.emplace(std::stod(p.at("data-x")), std::stod(p.at("data-y")));
      }
    }
    return pts;
  };
  EXPECT_EQ(drawn("throughput", ""), throughput);
  EXPECT_EQ(drawn("loss", "training loss"), loss);
  EXPECT_EQ(drawn("accuracy", "validation accuracy"), accuracy);
  // Two runs in the metrics file: the first and the restarted one.
  std::set<std::string> series;
  for (const auto& p : elements(svg_by_id(b.dom, "throughput"), "circle", "point"))
    series.insert(p.at("data-series"));
  EXPECT_EQ(series.size(), 2u);

  // Every rank's split: the mean over the step lines of each part.
  const char* keys[] = {"data_wait_ms", "forward_backward_ms", "sync_wait_ms", "optimizer_ms"};
  auto bars = elements(svg_by_id(b.dom, "split"), "rect", "part");
  ASSERT_EQ(bars.size(), 8u) << svg_by_id(b.dom, "split");
  for (const auto& bar : bars) {
    const int rank = std::stoi(bar.at("data-row").substr(5));  // "rank N"
    const std::map<std::string, int> parts = {
        {"data", 0}, {"compute (forward+backward)", 1}, {"sync", 2}, {"optimizer", 3}};
    ASSERT_EQ(parts.count(bar.at("data-part")), 1u) << bar.at("data-part");
    const int part = parts.at(bar.at("data-part"));
    double mean = 0;
    for (const auto* j : steps)
      mean += (*j)["ranks"][rank][keys[part]].get<double>() / static_cast<double>(steps.size());
    EXPECT_NEAR(std::stod(bar.at("data-value")), mean, 1e-9 * std::max(1.0, mean))
        << bar.at("data-part");
  }

  // The fault and the restart, on the charts and in the table.
  std::map<std::string, int> marks;
  for (const auto& m : elements(svg_by_id(b.dom, "throughput"), "line", "marker"))
    ++marks[m.at("data-kind")];
  EXPECT_GE(marks["fault"], 1) << "the launcher's line for rank 1 killed by signal 9";
  EXPECT_GE(marks["restart"], 2) << "the launcher's restart line and the restarted run's start";
  EXPECT_GE(marks["checkpoint"], 2);
  std::map<std::string, int> rows;
  for (const auto& r : elements(b.dom, "tr", "event")) ++rows[r.at("data-kind")];
  EXPECT_EQ(rows["fault"], marks["fault"]);
  EXPECT_EQ(rows["restart"], marks["restart"]);

  // The trace is linked, relative to the page, and is there.
  auto links = elements(b.dom, "a", "trace");
  ASSERT_EQ(links.size(), 1u);
  EXPECT_TRUE(fs::exists(fs::path(page).parent_path() / links[0].at("href")))
      << links[0].at("href");
}

TEST_F(ReportChromium, BenchTrainOutputShowsScalingAndPlotStillWorks) {
  const std::string svg = dir_ + "/scaling.svg";
  CliRun bench = run(
      "bench train --model cnn --np 1,2 --steps 6 --warmup 1 --batch 32 --synthetic --plot " + svg);
  ASSERT_EQ(bench.exit_code, 0) << bench.out;
  std::vector<nlohmann::json> lines;
  for (auto& j : json_lines(bench.out)) {
    if (j.value("bench", "") == "train") lines.push_back(j);
  }
  ASSERT_EQ(lines.size(), 2u) << bench.out;
  std::ofstream(dir_ + "/bench.jsonl") << lines[0].dump() << "\n" << lines[1].dump() << "\n";
  ASSERT_TRUE(fs::exists(svg)) << bench.out;  // bench train --plot still writes its chart

  const std::string page = dir_ + "/bench.html";
  CliRun report = run("report " + dir_ + "/bench.jsonl -o " + page);
  ASSERT_EQ(report.exit_code, 0) << report.out;
  const std::string shot = artifact_dir() + "/report-bench.png";
  Browser b = open_in_chromium(page, shot);
  ASSERT_EQ(b.exit_code, 0) << b.log;
  EXPECT_TRUE(b.console.empty()) << b.console.front();
  std::printf("screenshot: %s\n", shot.c_str());

  std::map<int, double> sps, eff;
  for (const auto& c : elements(b.dom, "circle", "")) {
    if (c.count("data-samples-per-s"))
      sps[std::stoi(c.at("data-np"))] = std::stod(c.at("data-samples-per-s"));
    if (c.count("data-efficiency"))
      eff[std::stoi(c.at("data-np"))] = std::stod(c.at("data-efficiency"));
  }
  ASSERT_EQ(sps.size(), 2u) << b.dom;
  for (const auto& j : lines) {
    const int np = j["np"].get<int>();
    EXPECT_EQ(sps[np], j["samples_per_s"].get<double>()) << np;
    EXPECT_EQ(eff[np], j["scaling_efficiency"].get<double>()) << np;
  }
  // --plot's file is the chart the page inlines.
  const std::string file = slurp(svg);
  for (const auto& j : lines) {
    EXPECT_NE(file.find("data-samples-per-s='" + j["samples_per_s"].dump() + "'"),
              std::string::npos)
        << file;
  }
}

}  // namespace
