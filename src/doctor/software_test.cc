// mpirun banners and BLAS paths as real installations print and name them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "doctor/blas.h"
#include "doctor/known_host.h"
#include "doctor/packages.h"
#include "doctor/mpi_version.h"

namespace hpct::doctor {
namespace {

TEST(DoctorSoftware, ParsesMpirunBanners) {
  MpiFacts m;
  parse_mpirun_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", m);
  EXPECT_EQ(m.implementation, "Open MPI");
  EXPECT_EQ(m.version, "4.1.4");
  parse_mpirun_version("HYDRA build details:\n    Version:                                 4.0.2\n"
                       "    Release Date:                            Thu Apr  7 12:34:45 CDT 2022\n",
                       m);
  EXPECT_EQ(m.implementation, "MPICH");
  EXPECT_EQ(m.version, "4.0.2");
  parse_mpirun_version("Intel(R) MPI Library for Linux* OS, Version 2021.5 Build 20211102 (id: 9279b7d62)\n", m);
  EXPECT_EQ(m.implementation, "Intel MPI");
  EXPECT_EQ(m.version, "2021.5");
  parse_mpirun_version("something else\n", m);
  EXPECT_EQ(m.implementation, "unknown");
  m.found = true;
  m.implementation = "Open MPI";
  m.version = "4.1.4";
  EXPECT_EQ(mpi_label(m), "Open MPI 4.1.4");
  m.found = false;
  EXPECT_EQ(mpi_label(m), "none");
}

TEST(DoctorSoftware, ClassifiesBlasPaths) {
  EXPECT_EQ(classify_blas("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3").kind, "OpenBLAS");
  EXPECT_EQ(classify_blas("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3").variant, "pthread");
  EXPECT_EQ(classify_blas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0").kind, "reference");
  EXPECT_EQ(classify_blas("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3").kind, "BLIS");
  EXPECT_EQ(classify_blas("/usr/lib/x86_64-linux-gnu/libmkl_rt.so").kind, "MKL");
  EXPECT_EQ(classify_blas("").kind, "none");
  // This machine has some answer, whatever it is.
  EXPECT_FALSE(find_blas().kind.empty());
}

TEST(DoctorSoftware, ReadsTheLibrariesAnElfFileNames) {
  // This test program links the C library; a text file and a missing one name nothing.
  auto self = elf_needed("/proc/self/exe");
  EXPECT_NE(std::find(self.begin(), self.end(), "libc.so.6"), self.end());
  EXPECT_TRUE(elf_needed("/etc/hostname").empty());
  EXPECT_TRUE(elf_needed("/nonexistent/libtorch_cpu.so").empty());
  EXPECT_TRUE(names_system_blas({"libc.so.6", "libblas.so.3"}));
  EXPECT_TRUE(names_system_blas({"libopenblas.so.0"}));
  EXPECT_FALSE(names_system_blas({"libc10.so", "libgomp.so.1", "libcudart.so.13"}));
}

TEST(DoctorSoftware, TorchFromTheIndexIsReportedWithItsOwnBlas) {
  // The build's libtorch_cpu (torch from the package index) links libc10 and
  // no system BLAS: doctor says it brings its own instead of warning.
  const std::string torch = hpctrain_libtorch();
  ASSERT_FALSE(torch.empty()) << "the build's libtorch_cpu.so was not found";
  auto needed = elf_needed(torch);
  EXPECT_NE(std::find(needed.begin(), needed.end(), "libc10.so"), needed.end());
  EXPECT_FALSE(names_system_blas(needed));
  BlasFacts b = find_blas();
  EXPECT_EQ(b.kind, "built-in");
  EXPECT_EQ(b.path, torch);
}

TEST(DoctorSoftware, TrackedPackagesFromDpkgStatus) {
  const std::string status =
      "Package: libtorch1.13\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.13.1+dfsg-4\n"
      "Description: runtime\n continued line: not a field\n\n"
      "Package: libtorch-dev\nStatus: install ok installed\nVersion: 1.13.1+dfsg-4\n\n"
      "Package: openmpi-bin\nStatus: deinstall ok config-files\nVersion: 4.1.4-3\n\n"
      "Package: hpctrain\nStatus: install ok installed\nVersion: 0.1.0-1\n";
  auto p = parse_dpkg_status(status);
  std::map<std::string, std::string> want = {{"hpctrain", "0.1.0-1"}, {"libtorch1.13", "1.13.1+dfsg-4"}};
  EXPECT_EQ(p, want);
  EXPECT_TRUE(tracked_package("libopenblas0-pthread"));
  EXPECT_FALSE(tracked_package("libtorch-test"));
}

TEST(DoctorSoftware, SshDumpGivesStrictnessFilesAndTheNameLookedUp) {
  auto k = parse_ssh_dump(
      "user alice\nhostname 10.0.0.2\nport 22\nstricthostkeychecking false\n"
      "userknownhostsfile ~/.ssh/known_hosts ~/.ssh/known_hosts2\n"
      "globalknownhostsfile /etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2\n",
      "/home/alice");
  EXPECT_EQ(k.strict, "false");
  EXPECT_EQ(k.lookup, "10.0.0.2");
  ASSERT_EQ(k.files.size(), 4u);
  EXPECT_EQ(k.files[0], "/home/alice/.ssh/known_hosts");
  EXPECT_EQ(k.files[2], "/etc/ssh/ssh_known_hosts");
  EXPECT_EQ(parse_ssh_dump("hostname node1\nport 2222\n", "/root").lookup, "[node1]:2222");
  EXPECT_EQ(parse_ssh_dump("hostname node1\nhostkeyalias n1\n", "/root").lookup, "n1");
}

}  // namespace
}  // namespace hpct::doctor
