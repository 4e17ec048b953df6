#include "data/source/url.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/source/http.h"

namespace hpct::data {
namespace {

TEST(Url, TellsRemoteFromLocalAndSplitsS3) {
  EXPECT_TRUE(is_remote_url("s3://b/k"));
  EXPECT_TRUE(is_remote_url("https://h/x.tar"));
  EXPECT_FALSE(is_remote_url("file:///x.tar"));
  EXPECT_FALSE(is_remote_url("shards/x.tar"));
  EXPECT_EQ(strip_file_scheme("file:///a/b.tar"), "/a/b.tar");
  S3Location loc;
  ASSERT_TRUE(parse_s3_url("s3://bucket/dir/train-000001.tar", &loc));
  EXPECT_EQ(loc.bucket, "bucket");
  EXPECT_EQ(loc.key, "dir/train-000001.tar");
  EXPECT_FALSE(parse_s3_url("https://h/x", &loc));
  EXPECT_THROW(parse_s3_url("s3:///key", &loc), Error);
  EXPECT_EQ(uri_encode("a b/c+d~", true), "a%20b/c%2Bd~");
  EXPECT_EQ(uri_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(source_of("https://h:8443/a/b.tar"), "https://h:8443");
  EXPECT_EQ(source_of("s3://bucket/a/b.tar"), "s3://bucket");
}

TEST(Url, S3SettingsComeAsTheAwsCliTakesThem) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/hpct-aws-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string home = tmpl;
  fs::create_directories(home + "/.aws");
  std::ofstream(home + "/.aws/credentials")
      << "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n"
      << "[team]\naws_access_key_id=TEAM\naws_secret_access_key=teamsecret\n"
      << "aws_session_token = tok\n";
  std::ofstream(home + "/.aws/config")
      << "[default]\nregion = eu-west-1\n"
      << "[profile team]\nregion = ap-south-1\nendpoint_url = http://minio:9000/\n"
      << "s3 =\n  addressing_style = path\n";
  MapEnv env{{"HOME", home}};
  S3Settings s = s3_settings_from(env);
  EXPECT_EQ(s.access_key, "DEF");
  EXPECT_EQ(s.secret_key, "defsecret");
  EXPECT_EQ(s.region, "eu-west-1");
  EXPECT_EQ(s.endpoint, "https://s3.eu-west-1.amazonaws.com");

  env.set("AWS_PROFILE", "team");
  s = s3_settings_from(env);
  EXPECT_EQ(s.access_key, "TEAM");
  EXPECT_EQ(s.session_token, "tok");
  EXPECT_EQ(s.region, "ap-south-1");
  EXPECT_EQ(s.endpoint, "http://minio:9000");

  // The environment wins over the profile, as with the AWS CLI.
  env.set("AWS_ACCESS_KEY_ID", "ENV");
  env.set("AWS_SECRET_ACCESS_KEY", "envsecret");
  env.set("AWS_REGION", "us-west-2");
  env.set("AWS_ENDPOINT_URL", "http://127.0.0.1:4568");
  s = s3_settings_from(env);
  EXPECT_EQ(s.access_key, "ENV");
  EXPECT_EQ(s.secret_key, "envsecret");
  EXPECT_EQ(s.session_token, "");
  EXPECT_EQ(s.region, "us-west-2");
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:4568");
  EXPECT_EQ(s3_object_url(s, {"b", "a b.tar"}), "http://127.0.0.1:4568/b/a%20b.tar");

  // No credentials anywhere: one message naming what to set.
  MapEnv empty{{"HOME", home + "/nowhere"}};
  try {
    s3_settings_from(empty);
    FAIL() << "no credentials accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AWS_ACCESS_KEY_ID"), std::string::npos) << e.what();
  }
  fs::remove_all(home);
}

TEST(Url, XmlValuesDecodeEntities) {
  auto v = xml_values("<R><Key>a&amp;b.tar</Key><Key>c</Key><IsTruncated>false</IsTruncated></R>",
                      "Key");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "a&b.tar");
  EXPECT_EQ(v[1], "c");
}

}  // namespace
}  // namespace hpct::data
