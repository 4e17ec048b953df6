#include "data/source/url.h"

#include <fstream>
#include <map>

#include "core/error.h"

namespace hpct::data {
namespace {

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The "key = value" lines of one [section] of an AWS INI file (empty when
// the file or the section is missing). Nested sub-sections ("s3 =" followed
// by indented lines) are skipped.
std::map<std::string, std::string> ini_section(const std::string& path,
                                               const std::string& section) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      inside = trim(t.substr(1, t.size() - 2)) == section;
      continue;
    }
    if (!inside || line[0] == ' ' || line[0] == '\t') continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    out[trim(t.substr(0, eq))] = trim(t.substr(eq + 1));
  }
  return out;
}

std::string get(const Env& env, const char* name) { return env.get(name).value_or(""); }

}  // namespace

bool is_remote_url(const std::string& path) {
  return starts_with(path, "http://") || starts_with(path, "https://") ||
         starts_with(path, "s3://");
}

std::string strip_file_scheme(const std::string& path) {
  return starts_with(path, "file://") ? path.substr(7) : path;
}

bool parse_s3_url(const std::string& url, S3Location* out) {
  if (!starts_with(url, "s3://")) return false;
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  out->bucket = rest.substr(0, slash);
  out->key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (out->bucket.empty()) {
    throw_invalid_argument(url + ": no bucket; expected s3://BUCKET/KEY");
  }
  return true;
}

S3Settings s3_settings_from(const Env& env) {
  S3Settings s;
  const std::string home = get(env, "HOME");
  s.profile = get(env, "AWS_PROFILE");
  if (s.profile.empty()) s.profile = get(env, "AWS_DEFAULT_PROFILE");
  if (s.profile.empty()) s.profile = "default";
  std::string cred_file = get(env, "AWS_SHARED_CREDENTIALS_FILE");
  if (cred_file.empty()) cred_file = home + "/.aws/credentials";
  std::string conf_file = get(env, "AWS_CONFIG_FILE");
  if (conf_file.empty()) conf_file = home + "/.aws/config";
  auto creds = ini_section(cred_file, s.profile);
  auto conf = ini_section(conf_file, s.profile == "default" ? "default" : "profile " + s.profile);

  // As the AWS CLI: keys in the environment win over the profile's.
  if (!get(env, "AWS_ACCESS_KEY_ID").empty()) {
    s.access_key = get(env, "AWS_ACCESS_KEY_ID");
    s.secret_key = get(env, "AWS_SECRET_ACCESS_KEY");
    s.session_token = get(env, "AWS_SESSION_TOKEN");
    s.credentials_from = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY";
    if (s.secret_key.empty()) {
      throw_invalid_argument("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both");
    }
  } else {
    for (auto* section : {&creds, &conf}) {
      if (s.access_key.empty() && section->count("aws_access_key_id")) {
        s.access_key = (*section)["aws_access_key_id"];
        s.secret_key = (*section)["aws_secret_access_key"];
        s.session_token = (*section)["aws_session_token"];
        s.credentials_from =
            "profile " + s.profile + " in " + (section == &creds ? cred_file : conf_file);
      }
    }
    if (s.access_key.empty() || s.secret_key.empty()) {
      throw_invalid_argument(
          "s3://: no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
          "aws_access_key_id and aws_secret_access_key for profile '" +
          s.profile + "' in " + cred_file + " (AWS_PROFILE picks the profile)");
    }
  }
  for (const char* v : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (!get(env, v).empty()) {
      s.region = get(env, v);
      break;
    }
  }
  if (get(env, "AWS_REGION").empty() && get(env, "AWS_DEFAULT_REGION").empty() &&
      conf.count("region")) {
    s.region = conf["region"];
  }
  for (const char* v : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    if (s.endpoint.empty()) s.endpoint = get(env, v);
  }
  if (s.endpoint.empty() && conf.count("endpoint_url")) s.endpoint = conf["endpoint_url"];
  if (s.endpoint.empty()) s.endpoint = "https://s3." + s.region + ".amazonaws.com";
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  if (!starts_with(s.endpoint, "http://") && !starts_with(s.endpoint, "https://")) {
    throw_invalid_argument(
        "S3 endpoint '" + s.endpoint +
        "' (AWS_ENDPOINT_URL or endpoint_url) must start with http:// or https://");
  }
  return s;
}

std::string uri_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string s3_object_url(const S3Settings& s, const S3Location& loc) {
  return s.endpoint + "/" + uri_encode(loc.bucket, false) + "/" + uri_encode(loc.key, true);
}

std::string source_of(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "file";
  const size_t end = url.find('/', scheme + 3);
  return url.substr(0, end);
}

}  // namespace hpct::data
