// The engine's pure parts: message encoding, fusion planning, the response
// cache, compression.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/compression.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/response_cache.h"

namespace hpct::engine {
namespace {

Request req(const std::string& name, std::vector<std::int64_t> shape,
            comm::DataType dtype = comm::DataType::kFloat32) {
  Request r;
  r.name = name;
  r.shape = std::move(shape);
  r.dtype = dtype;
  return r;
}

TEST(EngineMessage, RoundTrips) {
  RequestList l;
  l.shutdown = true;
  l.requests.push_back(req("a", {3, 4}));
  l.requests.back().waited_ms = 17;
  Request g = req("b/\"x\"", {});
  g.kind = CollectiveKind::kBroadcast;
  g.root = 2;
  l.requests.push_back(g);
  auto back = decode_requests(encode(l));
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_TRUE(back.shutdown);
  EXPECT_EQ(back.requests[0].signature(), l.requests[0].signature());
  EXPECT_EQ(back.requests[0].waited_ms, 17);
  EXPECT_EQ(back.requests[1].name, "b/\"x\"");
  EXPECT_EQ(back.requests[1].root, 2);

  ResponseList rl;
  rl.pending = true;
  rl.shutdown_rank = 1;
  Response e;
  e.type = Response::Type::kError;
  e.names = {"x", "y"};
  e.error = "boom";
  e.first_dims = {1, 2};
  rl.responses.push_back(e);
  auto rb = decode_responses(encode(rl));
  ASSERT_EQ(rb.responses.size(), 1u);
  EXPECT_TRUE(rb.pending);
  EXPECT_EQ(rb.shutdown_rank, 1);
  EXPECT_EQ(rb.responses[0].names, e.names);
  EXPECT_EQ(rb.responses[0].error, "boom");
  EXPECT_EQ(rb.responses[0].first_dims, e.first_dims);
}

TEST(EngineMessage, TruncatedIsDataCorrupt) {
  RequestList l;
  l.requests.push_back(req("abc", {5}));
  std::string b = encode(l);
  for (size_t cut = 0; cut < b.size(); ++cut) {
    EXPECT_THROW(decode_requests(b.substr(0, cut)), Error) << cut;
  }
}

TEST(EngineFusion, GroupsByKeyUpToThreshold) {
  auto a = req("a", {10});             // 40 B
  auto b = req("b", {10});             // 40 B
  auto c = req("c", {100});            // 400 B: over the threshold, alone
  auto d = req("d", {10}, comm::DataType::kFloat64);  // another dtype
  auto e = req("e", {5});              // 20 B: joins a+b
  std::vector<const Request*> ready = {&a, &b, &c, &d, &e};
  auto plan = plan_fusion(ready, 100);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].names, (std::vector<std::string>{"a", "b", "e"}));
  EXPECT_EQ(plan[1].names, (std::vector<std::string>{"c"}));
  EXPECT_EQ(plan[2].names, (std::vector<std::string>{"d"}));
  EXPECT_EQ(plan_fusion(ready, 0).size(), 5u);  // threshold 0: no fusion
}

TEST(EngineCache, StableIndicesAndReplacement) {
  ResponseCache cache(2);
  auto a = req("a", {2});
  auto b = req("b", {3});
  cache.insert(a);
  cache.insert(b);
  cache.insert(req("c", {1}));  // full
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.lookup(a), 0u);
  EXPECT_EQ(cache.lookup(b), 1u);
  EXPECT_FALSE(cache.lookup(req("c", {1})));
  auto a2 = req("a", {4});
  EXPECT_FALSE(cache.lookup(a2));
  cache.insert(a2);
  EXPECT_EQ(cache.lookup(a2), 0u);
  EXPECT_FALSE(cache.lookup(a));
}

TEST(EngineCache, SameSignatureAgreesWithTheSignatureText) {
  const Request base = req("t", {4, 5});
  std::vector<Request> variants(8, base);
  variants[1].shape = {5, 4};
  variants[2].dtype = comm::DataType::kFloat64;
  variants[3].op = comm::ReduceOp::kMax;
  variants[4].compression = Compression::kFp16;
  variants[5].kind = CollectiveKind::kBroadcast;
  variants[6].kind = CollectiveKind::kBroadcast;
  variants[6].root = 1;
  variants[7].root = 1;  // an allreduce ignores the root
  for (const auto& a : variants) {
    for (const auto& b : variants) {
      EXPECT_EQ(a.same_signature(b), a.signature() == b.signature())
          << a.signature() << " vs " << b.signature();
    }
  }
}

TEST(EngineCompression, RoundTripsWithinPrecisionAndScales) {
  std::vector<float> x(1003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 100.0f;
  for (Compression c : {Compression::kFp16, Compression::kBf16}) {
    std::vector<std::uint16_t> wire(x.size());
    std::vector<float> back(x.size());
    compress(x.data(), wire.data(), x.size(), c);
    decompress(wire.data(), back.data(), x.size(), c, 0.5f);
    double tol = c == Compression::kFp16 ? 1e-3 : 8e-3;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(back[i], x[i] * 0.5f, std::fabs(x[i]) * tol + 1e-3) << compression_name(c) << i;
    }
  }
}

}  // namespace
}  // namespace hpct::engine
