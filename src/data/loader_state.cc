// The Loader's resume position (loader.h: save_state, restore_state): what
// it saves, and the checks that a restored position belongs to this
// dataset, rank and shuffle.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/bytes.h"
#include "data/loader_impl.h"
#include "data/random.h"

namespace hpct::data {
namespace {

constexpr char kStateMagic[8] = {'H', 'P', 'C', 'T', 'L', 'D', 'S', '1'};

std::uint64_t hash_ids(const std::vector<std::uint64_t>& ids, size_t from) {
  std::uint64_t h = 0x52455354ull;  // "REST"
  for (size_t i = from; i < ids.size(); ++i) h = Rng::mix(h ^ ids[i]);
  return Rng::mix(h ^ (ids.size() - from));
}

}  // namespace

std::string Loader::save_state() const {
  impl_->open_remote();
  const Impl& m = *impl_;
  std::int64_t delivered;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    delivered = m.delivered;
  }
  const std::uint64_t pos = std::min<std::uint64_t>(m.total, static_cast<std::uint64_t>(delivered) * m.o.batch_size);
  ByteWriter w;
  w.raw(std::string_view(kStateMagic, sizeof kStateMagic));
  w.u64(m.fingerprint());
  w.u32(static_cast<std::uint32_t>(m.o.rank));
  w.u32(static_cast<std::uint32_t>(m.o.size));
  w.u64(m.o.seed);
  w.i64(m.o.batch_size);
  w.u8(m.o.drop_last);
  w.u8(m.o.shuffle);
  w.u64(m.o.shuffle_buffer);
  w.u64(m.o.shuffle_initial);
  w.i64(m.epoch);
  w.i64(delivered);
  w.u64(pos);
  w.u64(m.stats.skipped);
  // Informational, and checked on restore: the shard order, where the next
  // sample lies, and a hash of every sample still to come (the shuffle
  // buffer's state is a function of seed, epoch, rank and position, so the
  // hash covers it).
  w.u32(static_cast<std::uint32_t>(m.plan.shard_order.size()));
  for (auto s : m.plan.shard_order) w.u32(s);
  if (!m.remote && pos < m.plan.order.size()) {
    const SampleRef& next = m.index->sample(m.plan.order[pos]);
    w.u32(next.shard);
    w.u64(next.fields.front().header_offset);
  } else {
    w.u32(0);
    w.u64(0);
  }
  w.u64(m.remote ? 0 : hash_ids(m.plan.order, pos));
  return w.take();
}

void Loader::restore_state(const std::string& bytes) {
  Impl& m = *impl_;
  ByteReader r(bytes, "loader state");
  if (r.raw(sizeof kStateMagic) != std::string_view(kStateMagic, sizeof kStateMagic)) {
    throw_data_corrupt("loader state: not a saved hpct::data::Loader position");
  }
  auto check = [](bool ok, const std::string& what, const std::string& saved, const std::string& now) {
    if (!ok) throw_mismatch("loader state was saved with " + what + " " + saved + ", this loader has " + now);
  };
  const std::uint64_t fp = r.u64();
  const std::uint32_t rank = r.u32(), size = r.u32();
  const std::uint64_t seed = r.u64();
  const std::int64_t bs = r.i64();
  const bool drop_last = r.u8() != 0, shuffle = r.u8() != 0;
  const std::uint64_t buf = r.u64(), init = r.u64();
  const std::int64_t epoch = r.i64(), delivered = r.i64();
  const std::uint64_t pos = r.u64(), skipped = r.u64();
  std::vector<std::uint32_t> order(r.u32());
  for (auto& s : order) s = r.u32();
  r.u32();
  r.u64();
  const std::uint64_t rest_hash = r.u64();
  r.expect_done();
  check(rank == static_cast<std::uint32_t>(m.o.rank) && size == static_cast<std::uint32_t>(m.o.size),
        "rank", std::to_string(rank) + "/" + std::to_string(size),
        std::to_string(m.o.rank) + "/" + std::to_string(m.o.size));
  check(seed == m.o.seed, "seed", std::to_string(seed), std::to_string(m.o.seed));
  check(bs == m.o.batch_size && drop_last == m.o.drop_last, "batch size/drop_last",
        std::to_string(bs) + "/" + std::to_string(drop_last),
        std::to_string(m.o.batch_size) + "/" + std::to_string(m.o.drop_last));
  check(shuffle == m.o.shuffle && buf == m.o.shuffle_buffer && init == m.o.shuffle_initial,
        "shuffle settings", std::to_string(buf) + "/" + std::to_string(init),
        std::to_string(m.o.shuffle_buffer) + "/" + std::to_string(m.o.shuffle_initial));
  m.set_epoch(epoch, delivered);
  m.open_remote();
  check(fp == m.fingerprint(), "dataset fingerprint", std::to_string(fp), std::to_string(m.fingerprint()));
  if (!m.remote) {
    check(order == m.plan.shard_order, "shard order", "(saved)", "a different one");
    check(rest_hash == hash_ids(m.plan.order, pos), "remaining sample order", "(saved)", "a different one");
  }
  m.stats.skipped = skipped;
}

}  // namespace hpct::data
