// Shard locations as URLs: which ones are remote, and where an s3:// object
// is served and with which credentials.
//
// S3 settings are found the way the AWS CLI finds them: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else the profile
// (AWS_PROFILE, else "default") in ~/.aws/credentials
// (AWS_SHARED_CREDENTIALS_FILE); the region from AWS_REGION,
// AWS_DEFAULT_REGION or the profile in ~/.aws/config (AWS_CONFIG_FILE), else
// us-east-1; the endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the
// profile's endpoint_url, else https://s3.<region>.amazonaws.com. Objects
// are addressed path-style (<endpoint>/<bucket>/<key>), which AWS and every
// S3-compatible server accept.
#pragma once

#include <string>

#include "core/env.h"

namespace hpct::data {

// http://, https:// or s3:// (file:// and plain paths are local).
bool is_remote_url(const std::string& path);
// "file:///a/b" -> "/a/b"; anything else unchanged.
std::string strip_file_scheme(const std::string& path);

struct S3Location {
  std::string bucket;
  std::string key;  // may be empty (a bucket or a prefix)
};
// "s3://bucket/key" -> true and its parts; false for other schemes.
// InvalidArgument naming the URL when it has no bucket.
bool parse_s3_url(const std::string& url, S3Location* out);

struct S3Settings {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
  std::string region = "us-east-1";
  std::string endpoint;          // scheme://host[:port], no trailing slash
  std::string profile;           // where the credentials came from, for messages
  std::string credentials_from;  // "environment" or "profile NAME in FILE"
};

// Reads the settings as described above. InvalidArgument naming what to set
// when no credentials are found (anonymous requests are not made).
S3Settings s3_settings_from(const Env& env);

// Percent-encodes as SigV4 wants: every byte but A-Z a-z 0-9 - _ . ~ (and
// '/' when keep_slash).
std::string uri_encode(const std::string& s, bool keep_slash);

// "<endpoint>/<bucket>/<key>" with the key percent-encoded.
std::string s3_object_url(const S3Settings& s, const S3Location& loc);

// "https://host:port" or "s3://bucket": the source a URL's bytes are
// counted under in the metrics.
std::string source_of(const std::string& url);

}  // namespace hpct::data
