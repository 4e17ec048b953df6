// cuda_available() never throws and gives a reason when it says no; where a
// GPU is, it agrees with itself.
#include "comm/cuda/cuda_probe.h"

#include <gtest/gtest.h>

namespace hpct::comm {
namespace {

TEST(CudaProbeTest, AnswersWithAReasonAndNeverThrows) {
  std::string why;
  bool available = false;
  EXPECT_NO_THROW(available = cuda_available(&why));
  if (available) {
    EXPECT_GT(cuda_device_count(nullptr), 0);
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(cuda_device_count(nullptr), 0);  // a null reason is fine
  }
  std::cout << "cuda_available: " << (available ? "yes" : "no, " + why) << "\n";
}

}  // namespace
}  // namespace hpct::comm
