// doctor's GPU facts: nvidia-smi's output parsed from fixture files (in
// nvidia-smi's format; see their first lines), the NCCL wheel's version,
// and the gpu row of the report (no GPU, ranks sharing GPUs).
#include "doctor/gpu.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "doctor/checks.h"

namespace hpct::doctor {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(HPCT_DOCTOR_TESTDATA) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(GpuFacts, ParsesTheQueryOutputOfTwoGpus) {
  const auto gpus = parse_nvidia_smi_csv(fixture("nvidia_smi_fixture_query_2gpu.csv"));
  ASSERT_EQ(gpus.size(), 2u);  // the two comment lines are skipped
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_EQ(gpus[0].name, "NVIDIA H200");
  EXPECT_EQ(gpus[0].memory_mib, 143771u);
  EXPECT_EQ(gpus[0].driver, "580.159.03");
}

TEST(GpuFacts, ReadsTheCudaVersionFromTheHeader) {
  EXPECT_EQ(parse_nvidia_smi_cuda_version(fixture("nvidia_smi_fixture_header.txt")), "13.0");
  EXPECT_EQ(parse_nvidia_smi_cuda_version("no header here"), "");
}

TEST(GpuFacts, AnErrorMessageGivesNoGpu) {
  EXPECT_TRUE(parse_nvidia_smi_csv(fixture("nvidia_smi_fixture_no_driver.txt")).empty());
  EXPECT_TRUE(parse_nvidia_smi_csv("").empty());
  EXPECT_TRUE(parse_nvidia_smi_csv("0, NVIDIA H200, [N/A], 580.1").empty());
}

TEST(GpuFacts, NcclVersionFromTheWheel) {
  EXPECT_EQ(nccl_version_from_dist_info("nvidia_nccl_cu13-2.30.7.dist-info"), "2.30.7");
  EXPECT_EQ(nccl_version_from_dist_info("nvidia_nccl_cu12-2.21.5.dist-info"), "2.21.5");
  EXPECT_EQ(nccl_version_from_dist_info("nvidia_cublas-13.0.dist-info"), "");
  EXPECT_EQ(nccl_version_from_dist_info("nvidia_nccl_cu13"), "");
}

HostOutcome probed_host(const std::string& name, int slots, const GpuFacts& gpu) {
  HostOutcome h;
  h.name = name;
  h.slots = slots;
  h.session_ok = true;
  HostFacts f;
  f.gpu = gpu;
  h.facts = f;
  return h;
}

GpuFacts two_h200() {
  GpuFacts g;
  g.gpus = parse_nvidia_smi_csv(fixture("nvidia_smi_fixture_query_2gpu.csv"));
  g.driver = "580.159.03";
  g.cuda_driver = "13.0";
  g.cuda_torch = "13.0";
  g.nccl = "2.30.7";
  return g;
}

TEST(GpuCheck, NoGpuIsOneOkRow) {
  GpuFacts none;
  none.error = "nvidia-smi not found or did not answer within 5 s";
  DoctorInput in;
  in.hosts.push_back(probed_host("h1", 2, none));
  const auto rows = check_gpu(in);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, Status::kOk);
  EXPECT_EQ(rows[0].detail.rfind("no GPU (", 0), 0u) << rows[0].detail;
}

TEST(GpuCheck, RanksThatFitAndRanksThatShare) {
  DoctorInput in;
  in.hosts.push_back(probed_host("fits", 2, two_h200()));
  in.hosts.push_back(probed_host("shares", 4, two_h200()));
  const auto rows = check_gpu(in);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, Status::kOk);
  EXPECT_NE(rows[0].detail.find("2x NVIDIA H200 (143771 MiB), driver 580.159.03, CUDA 13.0 (driver) / 13.0 "
                                "(torch), NCCL 2.30.7"),
            std::string::npos)
      << rows[0].detail;
  EXPECT_NE(rows[0].detail.find("2 rank(s) fit 2 GPU(s)"), std::string::npos);
  EXPECT_EQ(rows[1].status, Status::kWarn);
  EXPECT_NE(rows[1].detail.find("4 ranks on 2 GPU(s)"), std::string::npos) << rows[1].detail;
  EXPECT_NE(rows[1].fix.find("shares:2"), std::string::npos) << rows[1].fix;
}

TEST(GpuCheck, FactsSurviveTheProbesJson) {
  HostFacts f;
  f.gpu = two_h200();
  const HostFacts back = host_facts_from_json(to_json(f));
  ASSERT_EQ(back.gpu.gpus.size(), 2u);
  EXPECT_EQ(back.gpu.gpus[1].name, "NVIDIA H200");
  EXPECT_EQ(back.gpu.nccl, "2.30.7");
  EXPECT_EQ(back.gpu.cuda_driver, "13.0");
  // An older probe without the field: no GPU facts, and no error either.
  nlohmann::json old = to_json(HostFacts{});
  old.erase("gpu");
  EXPECT_TRUE(host_facts_from_json(old).gpu.gpus.empty());
}

}  // namespace
}  // namespace hpct::doctor
