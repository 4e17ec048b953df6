// Shard lists as people write them: brace ranges and alternatives
// ("train-{000000..000099}.tar", "{train,val}-{0..9}.tar"), lists read from
// a file ("@shards.txt", one shard per line, '#' comments), and data server
// addresses ("tcp://host:port"), which pass through unexpanded.
#pragma once

#include <string>
#include <vector>

#include "data/source/file.h"

namespace hpct::data {

// Expands every brace group, left to right (ranges keep the zero padding of
// their first bound). InvalidArgument naming the pattern when a brace is
// unbalanced or a range is not two integers.
std::vector<std::string> expand_braces(const std::string& pattern);

// Each item: "@file" -> the file's lines (each expanded), anything else ->
// expand_braces, then any name with '*' or '?' -> fs.glob (a bucket listing
// for s3://; InvalidArgument when it matches nothing). Io when a list file cannot be read.
std::vector<std::string> expand_shard_list(const std::vector<std::string>& items, FileSystem& fs);

// "tcp://host:port" -> true with host and port set.
bool parse_tcp_source(const std::string& source, std::string* host, int* port);

}  // namespace hpct::data
