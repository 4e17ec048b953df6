#include "data/sample.h"

#include <cctype>

#include "core/error.h"
#include "data/formats/tfrecord.h"

namespace hpct::data {

void split_member_name(const std::string& name, std::string* key, std::string* ext) {
  size_t slash = name.rfind('/');
  size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = name.find('.', base);
  if (dot == std::string::npos) {
    *key = name;
    ext->clear();
    return;
  }
  *key = name.substr(0, dot);
  *ext = name.substr(dot + 1);
  for (auto& c : *ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

OnError parse_on_error(const std::string& s) {
  if (s == "fail") return OnError::kFail;
  if (s == "skip") return OnError::kSkip;
  throw_invalid_argument("--on-error " + s + ": expected fail or skip");
}

std::string RawSample::where() const {
  if (is_tfrecord_path(shard)) {
    return "TFRecord file " + shard + ", record " + std::to_string(member_index) + " (sample " + key +
           "), byte offset " + std::to_string(offset);
  }
  return "shard " + shard + ", member #" + std::to_string(member_index) + " (sample " + key +
         "), byte offset " + std::to_string(offset);
}

}  // namespace hpct::data
