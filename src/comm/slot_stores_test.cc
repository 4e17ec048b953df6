#include "comm/slot_stores.h"

#include <gtest/gtest.h>

namespace hpct::comm {
namespace {

using Clock = SlotStoreChoice::Clock;
using std::chrono::milliseconds;

constexpr std::size_t kSmall = 1 << 20;  // a quarter-slot piece
constexpr std::size_t kLarge = 2 << 20;  // a half-slot piece

// Speeds of a piece's own work as measured on the 2-vCPU EPYC VM
// (2026-11-27): 1 MiB pieces mostly 10-33 GB/s, now and then 3-5 GB/s
// when the rank was interrupted; in a slow stretch about 5 GB/s.
constexpr double kUsual[] = {21e9, 18e9, 25e9, 14e9, 27e9, 19e9, 23e9, 16e9, 20e9, 29e9};

void feed(SlotStoreChoice& c, Clock::time_point& t, std::size_t bytes, double scale, int n) {
  for (int i = 0; i < n; ++i) {
    t += milliseconds(1);
    c.note_plain_piece(t, bytes, kUsual[i % 10] * scale);
  }
}

void feed_slow(SlotStoreChoice& c, Clock::time_point& t, std::size_t bytes, double speed, int n) {
  for (int i = 0; i < n; ++i) {
    t += milliseconds(1);
    c.note_plain_piece(t, bytes, speed);
  }
}

TEST(SlotStoreChoice, UsualPiecesAndSingleInterruptedOnesKeepPlainStores) {
  SlotStoreChoice c;
  auto t = Clock::now();
  feed(c, t, kSmall, 1.0, 100);
  EXPECT_NEAR(c.typical(kSmall), 21e9, 3e9);
  for (int i = 0; i < 50; ++i) {
    t += milliseconds(1);
    c.note_plain_piece(t, kSmall, i % 3 == 0 ? 3.5e9 : kUsual[i % 10]);  // never 3 slow in a row
    EXPECT_FALSE(c.stream(t)) << "piece " << i;
  }
}

TEST(SlotStoreChoice, AStretchAboveTheFixedBoundStreamsForAWhileThenTriesPlainAgain) {
  SlotStoreChoice c;
  auto t = Clock::now();
  feed(c, t, kSmall, 1.0, 40);
  // 6 GB/s is above the fixed 5 GB/s: only the speed against this
  // machine's usual one shows the stretch.
  feed_slow(c, t, kSmall, 6e9, SlotStoreChoice::kSlowInARow - 1);
  EXPECT_FALSE(c.stream(t));
  feed_slow(c, t, kSmall, 6e9, 1);
  EXPECT_TRUE(c.stream(t));
  EXPECT_TRUE(c.stream(t + SlotStoreChoice::kStreamFor - milliseconds(1)));
  EXPECT_FALSE(c.stream(t + SlotStoreChoice::kStreamFor));
  // The slow pieces did not lower what counts as usual.
  EXPECT_NEAR(c.typical(kSmall), 21e9, 3e9);
}

TEST(SlotStoreChoice, BelowTheFixedBoundStreamsBeforeAnyUsualSpeedIsKnown) {
  SlotStoreChoice c;
  auto t = Clock::now();
  EXPECT_EQ(c.typical(kSmall), 0);
  feed_slow(c, t, kSmall, 2.5e9, SlotStoreChoice::kSlowInARow);
  EXPECT_TRUE(c.stream(t));
}

TEST(SlotStoreChoice, LargerPiecesAreJudgedAgainstLargerPieces) {
  SlotStoreChoice c;
  auto t = Clock::now();
  feed(c, t, kSmall, 1.0, 40);   // about 21 GB/s
  feed(c, t, kLarge, 0.8, 40);   // about 17 GB/s
  EXPECT_NEAR(c.typical(kLarge), 17e9, 2e9);
  feed_slow(c, t, kLarge, 7.5e9, 3);  // slow beside small pieces, usual for large ones
  EXPECT_FALSE(c.stream(t));
  feed_slow(c, t, kLarge, 6e9, SlotStoreChoice::kSlowInARow);  // below 17 / 2.5
  EXPECT_TRUE(c.stream(t));
}

TEST(SlotStoreChoice, TheUsualSpeedFollowsAMachineThatBecameFaster) {
  SlotStoreChoice c;
  auto t = Clock::now();
  feed_slow(c, t, kSmall, 6e9, SlotStoreChoice::kKept);  // started inside a stretch: taken as usual
  EXPECT_NEAR(c.typical(kSmall), 6e9, 1);
  feed(c, t, kSmall, 1.0, SlotStoreChoice::kKept);
  EXPECT_GT(c.typical(kSmall), 15e9);
  feed_slow(c, t, kSmall, 6e9, SlotStoreChoice::kSlowInARow);
  EXPECT_TRUE(c.stream(t));
}

}  // namespace
}  // namespace hpct::comm
