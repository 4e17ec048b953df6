#include "data/source/s3_upload.h"

#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/source/url.h"

namespace hpct::data {
namespace {

constexpr size_t kPartBytes = 8 << 20;  // S3 wants >= 5 MiB per part but the last

// An S3 object written as a multipart upload, a part sent as each fills.
class S3Writer final : public WritableFile {
 public:
  S3Writer(std::string url, HttpRequest base, HttpOptions http, SourceCounters* c)
      : url_(std::move(url)), base_(std::move(base)), http_(std::move(http)), c_(c) {
    HttpRequest r = base_;
    r.method = "POST";
    r.url += "?uploads=";  // "uploads=": SigV4's canonical form, which curl 7.88 signs as written
    const std::string body = http_call(r, http_, c_);
    auto ids = xml_values(body, "UploadId");
    if (ids.empty() || ids[0].empty()) {
      throw Error(ErrorCode::kIo,
                  url_ + ": the server started no multipart upload (no UploadId in its answer)");
    }
    upload_id_ = ids[0];
  }
  ~S3Writer() override {
    if (committed_) return;
    // Dropped uncommitted: abort, so no object appears and the parts go.
    try {
      HttpRequest r = base_;
      r.method = "DELETE";
      r.url += "?uploadId=" + uri_encode(upload_id_, false);
      http_call(r, http_, c_);
    } catch (const std::exception&) {
      // The server drops abandoned uploads by its own lifecycle rules.
    }
  }
  void append(std::string_view bytes) override {
    buf_.append(bytes);
    while (buf_.size() >= kPartBytes) {
      send_part(buf_.substr(0, kPartBytes));
      buf_.erase(0, kPartBytes);
    }
  }
  void commit() override {
    if (!buf_.empty() || etags_.empty()) send_part(buf_);
    buf_.clear();
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags_.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags_[i] +
             "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    HttpRequest r = base_;
    r.method = "POST";
    r.url += "?uploadId=" + uri_encode(upload_id_, false);
    r.body = xml;
    r.headers.push_back("Content-Type: application/xml");
    const std::string answer = http_call(r, http_, c_);
    if (answer.find("<Error>") != std::string::npos) {
      throw Error(ErrorCode::kIo,
                  url_ + ": completing the upload failed: " + answer.substr(0, 300));
    }
    committed_ = true;
  }
  const std::string& name() const override { return url_; }

 private:
  void send_part(const std::string& data) {
    HttpRequest r = base_;
    r.method = "PUT";
    r.url += "?partNumber=" + std::to_string(etags_.size() + 1) +
             "&uploadId=" + uri_encode(upload_id_, false);
    r.body = data;
    r.headers.push_back("Content-Type: application/octet-stream");
    std::map<std::string, std::string> headers;
    http_call(r, http_, c_, &headers);
    auto it = headers.find("etag");
    if (it == headers.end())
      throw Error(ErrorCode::kIo, url_ + ": the server returned no ETag for a part");
    etags_.push_back(it->second);
    c_->bytes += data.size();
  }
  std::string url_;
  HttpRequest base_;
  HttpOptions http_;
  SourceCounters* c_;
  std::string upload_id_;
  std::string buf_;
  std::vector<std::string> etags_;
  bool committed_ = false;
};

}  // namespace

std::unique_ptr<WritableFile> open_s3_upload(std::string url, HttpRequest base, HttpOptions http,
                                             SourceCounters* c) {
  return std::make_unique<S3Writer>(std::move(url), std::move(base), std::move(http), c);
}

}  // namespace hpct::data
