// SigV4 signing checked against AWS's published examples, plus S3 URLs and credential sources.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "core/storage/s3_client.hpp"
#include "core/storage/sigv4.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::storage;

namespace {

const std::string empty_sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const s3_credentials s3_example{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};

using cohort::test::scoped_env;

}  // namespace

TEST_CASE("SigV4 signs S3's GET Object example (a Range header) as AWS's documentation does") {
  signed_request_input in;
  in.method = "GET";
  in.path = "/test.txt";
  in.headers = {{"host", "examplebucket.s3.amazonaws.com"},
                {"range", "bytes=0-9"},
                {"x-amz-content-sha256", empty_sha256},
                {"x-amz-date", "20130524T000000Z"}};
  in.payload_sha256 = empty_sha256;
  const auto s = sign_v4(in, s3_example, "us-east-1", "s3", "20130524T000000Z");
  CHECK(s.canonical_request ==
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        "x-amz-content-sha256:" + empty_sha256 + "\nx-amz-date:20130524T000000Z\n\n"
        "host;range;x-amz-content-sha256;x-amz-date\n" + empty_sha256);
  CHECK(s.string_to_sign ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  CHECK(s.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK(s.authorization ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST_CASE("SigV4 signs S3's ListObjects example with its query parameters in canonical order") {
  signed_request_input in;
  in.method = "GET";
  in.path = "/";
  in.query = {{"prefix", "J"}, {"max-keys", "2"}};
  in.headers = {{"host", "examplebucket.s3.amazonaws.com"},
                {"x-amz-content-sha256", empty_sha256},
                {"x-amz-date", "20130524T000000Z"}};
  in.payload_sha256 = empty_sha256;
  const auto s = sign_v4(in, s3_example, "us-east-1", "s3", "20130524T000000Z");
  CHECK(s.canonical_request.rfind("GET\n/\nmax-keys=2&prefix=J\n", 0) == 0);
  CHECK(s.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST_CASE("SigV4 signs the test suite's get-vanilla request for another service") {
  signed_request_input in;
  in.method = "GET";
  in.path = "/";
  in.headers = {{"host", "example.amazonaws.com"}, {"x-amz-date", "20150830T123600Z"}};
  in.payload_sha256 = empty_sha256;
  const s3_credentials creds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  const auto s = sign_v4(in, creds, "us-east-1", "service", "20150830T123600Z");
  CHECK(s.signature == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST_CASE("URI encoding keeps unreserved characters, and '/' only in paths") {
  CHECK(uri_encode("a b/c~d_e.f-g+h=", true) == "a%20b/c~d_e.f-g%2Bh%3D");
  CHECK(uri_encode("a/b", false) == "a%2Fb");
  CHECK(canonical_query({{"uploads", ""}}) == "uploads=");
}

TEST_CASE("s3:// URLs give a bucket and a prefix without slashes at its ends; bad ones name the field") {
  const auto u = parse_s3_url("s3://my-bucket/runs/exp1/", "run.storage_path");
  CHECK(u.bucket == "my-bucket");
  CHECK(u.prefix == "runs/exp1");
  CHECK(u.key("checkpoints") == "runs/exp1/checkpoints");
  CHECK(u.text() == "s3://my-bucket/runs/exp1");
  CHECK(parse_s3_url("s3://bucket", "f").prefix.empty());
  CHECK(is_s3_url("s3://x"));
  CHECK_FALSE(is_s3_url("/data/s3://x"));
  for (const std::string bad : {"s3://", "s3://Upper/x", "s3://ab/x", "s3://bucket//x", "gs://bucket/x"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_s3_url(bad, "run.storage_path"),
                      Catch::StartsWith("run.storage_path: \"" + bad + "\" is not a usable S3 location") &&
                          Catch::Contains("s3://BUCKET/PREFIX"));
  }
}

TEST_CASE("credentials come from the AWS variables, else the AWS_PROFILE profile of the credentials file") {
  cohort::test::temp_dir dir;
  const std::string file =
      dir.write("credentials", "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n\n"
                               "[ci]\naws_access_key_id=CIKEY\naws_secret_access_key=cisecret\n"
                               "aws_session_token=citoken\n");
  scoped_env file_var("AWS_SHARED_CREDENTIALS_FILE", file.c_str());
  scoped_env region("AWS_REGION", nullptr);
  scoped_env default_region("AWS_DEFAULT_REGION", "eu-west-3");
  scoped_env endpoint("AWS_ENDPOINT_URL", "http://127.0.0.1:9");
  scoped_env endpoint_s3("AWS_ENDPOINT_URL_S3", nullptr);
  scoped_env token("AWS_SESSION_TOKEN", nullptr);
  SECTION("the variables win") {
    scoped_env id("AWS_ACCESS_KEY_ID", "ENVKEY");
    scoped_env secret("AWS_SECRET_ACCESS_KEY", "envsecret");
    const auto c = s3_config_from_environment();
    CHECK(c.credentials.access_key_id == "ENVKEY");
    CHECK(c.credentials.secret_access_key == "envsecret");
    CHECK(c.region == "eu-west-3");
    CHECK(c.endpoint == "http://127.0.0.1:9");
    CHECK(s3_config_from_environment("http://10.0.0.1:7000").endpoint == "http://10.0.0.1:7000");
  }
  SECTION("half of the variables is refused") {
    scoped_env id("AWS_ACCESS_KEY_ID", "ENVKEY");
    scoped_env secret("AWS_SECRET_ACCESS_KEY", nullptr);
    CHECK_THROWS_WITH(s3_config_from_environment(), Catch::Contains("must be set together"));
  }
  SECTION("else the file's profile") {
    scoped_env id("AWS_ACCESS_KEY_ID", nullptr);
    scoped_env secret("AWS_SECRET_ACCESS_KEY", nullptr);
    {
      scoped_env profile("AWS_PROFILE", nullptr);
      CHECK(s3_config_from_environment().credentials.access_key_id == "DEFKEY");
    }
    {
      scoped_env profile("AWS_PROFILE", "ci");
      const auto c = s3_config_from_environment();
      CHECK(c.credentials.access_key_id == "CIKEY");
      CHECK(c.credentials.secret_access_key == "cisecret");
      CHECK(c.credentials.session_token == "citoken");
    }
    {
      scoped_env profile("AWS_PROFILE", "nope");
      CHECK_THROWS_WITH(s3_config_from_environment(), Catch::Contains("has no profile [nope]") && Catch::Contains(file));
    }
  }
}

TEST_CASE("a malformed endpoint is refused naming it") {
  s3_config c;
  c.endpoint = "127.0.0.1:9000";
  CHECK_THROWS_WITH(s3_client(c), Catch::Contains("\"127.0.0.1:9000\" must start with http:// or https://"));
  c.endpoint = "http://127.0.0.1:9000/path";
  CHECK_THROWS_WITH(s3_client(c), Catch::Contains("with no path"));
}
