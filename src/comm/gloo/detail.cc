#include "comm/gloo/detail.h"

#include <cctype>
#include <sstream>

namespace hpct::comm::gloo_detail {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// Gloo prefixes its messages with "[/path/to/gloo/file.cc:123] ", which tells
// a user nothing; keep the rest.
std::string strip_gloo_location(const std::string& m) {
  if (!m.empty() && m[0] == '[') {
    const auto close = m.find("] ");
    if (close != std::string::npos && m.find(".cc:") < close) return m.substr(close + 2);
  }
  return m;
}

// Gloo reports application timeouts ("Timed out waiting 3000ms for recv
// operation to complete", "Read timeout", "Connect timeout") and socket
// trouble ("Connection closed by peer [ip]:port", "Read error [ip]:port:
// Connection reset by peer", "Socket closed") only as text.
ErrorCode classify_gloo_message(const std::string& message) {
  const std::string m = lower(message);
  if (m.find("timed out") != std::string::npos || m.find("timeout") != std::string::npos) {
    return ErrorCode::kTimeout;
  }
  for (const char* s : {"closed", "reset", "broken pipe", "refused", "read error", "write error",
                        "socket", "connection"}) {
    if (m.find(s) != std::string::npos) return ErrorCode::kPeerFailure;
  }
  return ErrorCode::kIo;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string describe_op(const char* op, size_t count, DataType dtype) {
  std::ostringstream os;
  os << op << " of " << count * dtype_size(dtype) << " bytes (" << count << " " << dtype_name(dtype)
     << ")";
  return os.str();
}

}  // namespace hpct::comm::gloo_detail
