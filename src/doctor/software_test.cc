// mpirun banners and BLAS paths as real installations print and name them.
#include <gtest/gtest.h>

#include "doctor/blas.h"
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

}  // namespace
}  // namespace hpct::doctor
