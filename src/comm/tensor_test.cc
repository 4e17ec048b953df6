// The tensor wrappers on real in-process Gloo ranks.
#include "comm/tensor.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/testing/thread_world.h"
#include "core/error.h"

namespace hpct::comm {
namespace {

using namespace std::chrono_literals;
using testing::run_gloo_world;

TEST(TensorOps, AllreduceEveryFloatDtype) {
  run_gloo_world(3, 20s, [](Communicator& c) {
    for (auto dtype : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16}) {
      auto t = torch::arange(10, torch::TensorOptions().dtype(dtype)) * (c.rank() + 1);
      allreduce(c, t, ReduceOp::kSum);
      auto expect = torch::arange(10, torch::TensorOptions().dtype(dtype)) * 6;  // 1+2+3
      EXPECT_TRUE(torch::equal(t, expect)) << c10::toString(dtype) << " rank " << c.rank();
      auto avg = torch::full({4}, static_cast<double>(c.rank()), torch::TensorOptions().dtype(dtype));
      allreduce(c, avg, ReduceOp::kAvg);
      EXPECT_TRUE(torch::equal(avg, torch::full({4}, 1.0, torch::TensorOptions().dtype(dtype))));
    }
  });
}

TEST(TensorOps, BroadcastAllgatherAllgathervReduceScatter) {
  run_gloo_world(2, 20s, [](Communicator& c) {
    auto b = c.rank() == 1 ? torch::ones({2, 3}, torch::kLong) * 7 : torch::zeros({2, 3}, torch::kLong);
    broadcast(c, b, /*root=*/1);
    EXPECT_TRUE(torch::equal(b, torch::ones({2, 3}, torch::kLong) * 7));

    auto g = allgather(c, torch::full({2}, c.rank(), torch::kInt));
    EXPECT_EQ(g.sizes(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(g[1][0].item<int>(), 1);

    // Rank 0 gives one row, rank 1 three rows, of 2 columns each.
    auto rows = torch::full({c.rank() == 0 ? 1 : 3, 2}, c.rank() + 10, torch::kFloat);
    auto v = allgatherv(c, rows);
    EXPECT_EQ(v.sizes(), (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(v[0][0].item<float>(), 10.0f);
    EXPECT_EQ(v[3][1].item<float>(), 11.0f);

    auto in = torch::arange(8, torch::kFloat);
    auto out = torch::empty({4}, torch::kFloat);
    reduce_scatter(c, in, out);
    EXPECT_TRUE(torch::equal(out, torch::arange(4, torch::kFloat).add(4 * c.rank()).mul(2)));
  });
}

TEST(TensorOps, SendRecv) {
  run_gloo_world(2, 20s, [](Communicator& c) {
    if (c.rank() == 0) {
      send(c, torch::arange(5, torch::kDouble), 1, /*tag=*/3);
    } else {
      auto t = torch::zeros({5}, torch::kDouble);
      recv(c, t, 0, /*tag=*/3);
      EXPECT_TRUE(torch::equal(t, torch::arange(5, torch::kDouble)));
    }
  });
}

TEST(TensorOps, UnusableTensorsAreRefusedWithTheFix) {
  run_gloo_world(1, 5s, [](Communicator& c) {
    auto strided = torch::ones({4, 4}).t();
    try {
      allreduce(c, strided);
      FAIL() << "no error for a non-contiguous tensor";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(".contiguous()"), std::string::npos) << e.what();
    }
    auto flags = torch::ones({3}, torch::kBool);
    EXPECT_THROW(allreduce(c, flags), Error);
    at::Tensor undefined;
    EXPECT_THROW(allreduce(c, undefined), Error);
    auto complex = torch::ones({3}, torch::kComplexFloat);
    EXPECT_THROW(allreduce(c, complex), Error);  // no complex dtype travels
  });
}

}  // namespace
}  // namespace hpct::comm
