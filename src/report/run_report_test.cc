#include "report/run_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"

namespace hpct::report {
namespace {

namespace fs = std::filesystem;

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const char kTwoRanks[] =
    R"({"type":"start","model":"cnn","np":2,"restart":0,"step":0,"resumed_from_step":-1,"time":1000.0}
{"type":"step","step":5,"loss":2.25,"samples_per_s":400.5,"data_wait_ms":1,"forward_backward_ms":20,"sync_wait_ms":4,"optimizer_ms":1,"slowest_rank":1,"ranks":[{"data_wait_ms":1,"forward_backward_ms":18,"sync_wait_ms":5,"optimizer_ms":1},{"data_wait_ms":1,"forward_backward_ms":20,"sync_wait_ms":4,"optimizer_ms":1}],"time":1005.0}
{"type":"step","step":10,"loss":1.75,"samples_per_s":420.25,"data_wait_ms":3,"forward_backward_ms":22,"sync_wait_ms":2,"optimizer_ms":1,"slowest_rank":1,"ranks":[{"data_wait_ms":3,"forward_backward_ms":20,"sync_wait_ms":3,"optimizer_ms":1},{"data_wait_ms":3,"forward_backward_ms":22,"sync_wait_ms":2,"optimizer_ms":1}],"time":1010.0}
{"type":"epoch","epoch":0,"step":10,"val_loss":1.5,"val_accuracy":0.625,"time":1011.0}
{"type":"summary","model":"cnn","np":2,"batch_per_rank":32,"steps":10,"train_samples_per_s":410,"val_loss":1.5,"val_accuracy":0.625,"wall_s":12,"params_identical_across_ranks":true,"time":1012.0}
)";

TEST(RunReport, SelfContainedPageWithEverySection) {
  RunInputs in;
  read_run_text("metrics.jsonl", kTwoRanks, &in);
  read_run_text("/tmp/run/timeline.json", "{\"traceEvents\":[]}", &in);
  read_run_text(
      "bench.jsonl",
      R"({"bench":"train","impl":"hpctrain","model":"cnn","batch_per_rank":64,"np":1,"samples_per_s":900.5,"scaling_efficiency":1.0})"
      "\n"
      R"({"bench":"train","impl":"hpctrain","model":"cnn","batch_per_rank":64,"np":2,"samples_per_s":1500.0,"scaling_efficiency":0.833})",
      &in);
  ReportPage page("hpctrain report");
  RunReportOptions o;
  o.output_path = "/tmp/run/report.html";
  add_run_sections(page, in, o);
  const std::string html = page.html();
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // Nothing loads at view time: no script, no external source, a CSP that forbids any.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_NE(html.find("Content-Security-Policy"), std::string::npos);
  for (const char* section :
       {"Run", "Throughput", "Loss and accuracy", "Step time per rank",
        "Restarts, faults and changes", "Scaling (bench train)", "Chrome trace"}) {
    EXPECT_NE(html.find(std::string("<h2>") + section), std::string::npos) << section;
  }
  EXPECT_EQ(occurrences(html, "data-series='train' data-x="), 2u);  // the 2 step lines' throughput
  EXPECT_NE(html.find("data-series='train' data-x='10.0' data-y='420.25'"), std::string::npos);
  EXPECT_NE(html.find("data-series='train training loss' data-x='5.0' data-y='2.25'"),
            std::string::npos);
  EXPECT_NE(html.find("data-series='validation accuracy' data-x='10.0' data-y='0.625'"),
            std::string::npos);
  // Rank 1's mean sync wait over the two intervals: (4 + 2) / 2.
  EXPECT_NE(html.find("data-row='rank 1' data-part='sync' data-value='3.0'"), std::string::npos);
  EXPECT_EQ(occurrences(html, "<rect class='part'"), 8u);
  EXPECT_NE(html.find("data-np='2' data-efficiency='0.833'"), std::string::npos);
  // The trace is linked relative to the page.
  EXPECT_NE(html.find("<a class='trace' href='timeline.json'>"), std::string::npos);
}

// Memory per rank: shown from the summary's "memory" array (the last run's),
// else from the last step line whose ranks carry the byte counts; absent
// when no line has them.
TEST(RunReport, MemoryPerRankFromTheSummaryOrTheStepLines) {
  RunInputs in;
  read_run_text("metrics.jsonl", kTwoRanks, &in);
  {
    ReportPage page("hpctrain report");
    add_run_sections(page, in, RunReportOptions{});
    EXPECT_EQ(page.html().find("<h2>Memory per rank"), std::string::npos);
  }
  read_run_text(
      "more.jsonl",
      R"({"type":"step","step":15,"loss":1.5,"ranks":[{"optimizer_state_bytes":53400000,"peak_rss_bytes":812000000},{"optimizer_state_bytes":53300000}]})"
      "\n",
      &in);
  {
    ReportPage page("hpctrain report");
    add_run_sections(page, in, RunReportOptions{});
    const std::string html = page.html();
    EXPECT_NE(html.find("<h2>Memory per rank"), std::string::npos);
    EXPECT_NE(html.find("<td class='text'>rank 1</td><td>&ndash;</td><td>&ndash;</td><td>53.3</td>"),
              std::string::npos) << html;
    EXPECT_NE(html.find("<td>53.4</td><td>812.0</td>"), std::string::npos);
    EXPECT_NE(html.find("step 15"), std::string::npos);
  }
  read_run_text(
      "summary.jsonl",
      R"({"type":"summary","model":"mlp","np":1,"memory":[{"parameter_bytes":80000000,"gradient_bytes":26700000,"optimizer_state_bytes":53400000,"peak_rss_bytes":900000000}]})"
      "\n",
      &in);
  ReportPage page("hpctrain report");
  add_run_sections(page, in, RunReportOptions{});
  const std::string html = page.html();
  EXPECT_NE(html.find("<td class='text'>rank 0</td><td>80.0</td><td>26.7</td><td>53.4</td><td>900.0</td>"),
            std::string::npos) << html;
  EXPECT_NE(html.find("the run's summary line"), std::string::npos);
}

TEST(RunReport, OlderFileWithoutPerRankSplitSaysSo) {
  RunInputs in;
  read_run_text(
      "old.jsonl",
      R"({"type":"step","step":50,"loss":1.0,"samples_per_s":300,"data_wait_ms":1,"forward_backward_ms":2,"sync_wait_ms":3,"optimizer_ms":4,"slowest_rank":0})",
      &in);
  ReportPage page("old");
  add_run_sections(page, in, RunReportOptions{});
  const std::string html = page.html();
  EXPECT_NE(html.find("only the slowest rank"), std::string::npos);
  EXPECT_NE(html.find("data-row='slowest' data-part='optimizer' data-value='4.0'"),
            std::string::npos);
  EXPECT_NE(html.find("No summary line"), std::string::npos);
  EXPECT_NE(html.find("No Chrome trace"), std::string::npos);
  EXPECT_NE(html.find("No accuracy"), std::string::npos);
}

TEST(RunReport, NothingToReportIsAnError) {
  ReportPage page("x");
  EXPECT_THROW(add_run_sections(page, RunInputs{}, RunReportOptions{}), Error);
}

// What another command (hpctrain plan) adds: a plot of its JSON lines.
TEST(RunReport, JsonlPlotOneSeriesPerValueOfTheSeriesKey) {
  const std::string path = "/tmp/hpct-report-plan-" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream(path) << R"({"hosts":1,"path":"flat","samples_per_s":500})"
                         "\n"
                      << R"({"hosts":2,"path":"flat","samples_per_s":900})"
                         "\n"
                      << R"({"hosts":2,"path":"hierarchical","samples_per_s":950.5})"
                         "\n"
                      << R"({"note":"a line without x"})"
                         "\n";
  ReportPage page("plan");
  add_jsonl_plot(page,
                 parse_plot_spec(path + ":x=hosts:y=samples_per_s:series=path:title=Predicted"));
  const std::string html = page.html();
  EXPECT_NE(html.find("<h2>Predicted</h2>"), std::string::npos);
  EXPECT_EQ(occurrences(html, "<circle class='point'"), 3u);
  EXPECT_NE(html.find("data-series='hierarchical' data-x='2.0' data-y='950.5'"), std::string::npos);
  EXPECT_NE(html.find("data-series='flat' data-x='1.0' data-y='500.0'"), std::string::npos);
  try {
    add_jsonl_plot(page, parse_plot_spec(path + ":x=nodes:y=samples_per_s"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no line has a number at nodes"), std::string::npos)
        << e.what();
  }
  ::unlink(path.c_str());
  EXPECT_THROW(add_jsonl_plot(page, parse_plot_spec(path + ":x=hosts:y=samples_per_s")),
               Error);  // gone
  EXPECT_THROW(parse_plot_spec("plan.jsonl"), Error);
  EXPECT_THROW(parse_plot_spec("plan.jsonl:x=hosts"), Error);
  EXPECT_THROW(parse_plot_spec("plan.jsonl:x=hosts:y=a:colour=red"), Error);
}

TEST(RunReport, WriteReplacesTheFileWhole) {
  const std::string path = "/tmp/hpct-report-page-" + std::to_string(::getpid()) + ".html";
  ReportPage page("a & b");
  page.add_section("One", "<p>x</p>");
  page.write(path);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<title>a &amp; b</title>"), std::string::npos);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ::unlink(path.c_str());
  EXPECT_THROW(page.write("/nonexistent-dir/report.html"), Error);
}

}  // namespace
}  // namespace hpct::report
