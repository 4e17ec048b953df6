// The data server's messages (payloads of net/frame.h frames); see
// data_server.h for the protocol. Exposed so tests can speak it raw.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/sample.h"

namespace hpct::data::wire {

enum class Kind : std::uint8_t { kOpen = 1, kHeader = 2, kError = 3, kChunk = 4, kEnd = 5 };
constexpr char kMagic[8] = {'H', 'P', 'C', 'T', 'D', 'A', 'T', '1'};

struct Open {
  std::uint32_t rank = 0;
  std::uint32_t size = 1;
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::uint64_t start = 0;  // position in the rank's epoch to stream from
  bool shuffle = true;
  std::uint64_t shuffle_buffer = 1000;
  std::uint64_t shuffle_initial = 100;
  bool drop_last = false;
};

struct Header {
  std::uint64_t total = 0;          // samples in this rank's epoch (padding included)
  std::uint64_t padded = 0;
  std::uint64_t dataset_samples = 0;
  std::uint64_t fingerprint = 0;    // ShardIndex::fingerprint
  std::uint64_t index_skipped = 0;  // samples the server lost to damaged shards
};

struct Chunk {
  std::uint64_t first = 0;  // position of samples[0] in the rank's epoch
  std::vector<RawSample> samples;
};

std::string encode(const Open& m);
std::string encode(const Header& m);
std::string encode_error(std::uint32_t code, const std::string& message);
std::string encode(const Chunk& m);
std::string encode_end(std::uint64_t total);

// The kind of a payload; DataCorrupt naming `from` when empty or unknown.
Kind kind_of(std::string_view payload, const std::string& from);
// Each raises DataCorrupt naming `from` when the bytes are not one whole message.
Open decode_open(std::string_view payload, const std::string& from);
Header decode_header(std::string_view payload, const std::string& from);
void decode_error(std::string_view payload, const std::string& from, std::uint32_t* code,
                  std::string* message);
Chunk decode_chunk(std::string_view payload, const std::string& from);
std::uint64_t decode_end(std::string_view payload, const std::string& from);

}  // namespace hpct::data::wire
