// The S3 client against a real S3-compatible server (s3rver) on 127.0.0.1: objects, ranges,
// paginated listings, downloads in ranges several at once, signature errors and multipart uploads
// (several parts at once, larger parts for a file past S3's 10,000), including one cut off
// mid-way.
#include <catch2/catch.hpp>

#include <fstream>
#include <random>
#include <utility>
#include <vector>

#include "core/storage/s3_client.hpp"
#include "tests/support/files.hpp"
#include "tests/support/s3_fault_proxy.hpp"
#include "tests/support/s3_server.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::storage;

namespace {

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(gen() & 0xff);
  return out;
}

// The test server, and a client that reaches it through a fault proxy.
struct proxied_server {
  cohort::test::s3_server server;
  cohort::test::s3_fault_proxy proxy{server.port()};
  const s3_client s3{through(proxy, server)};

  static s3_config through(const cohort::test::s3_fault_proxy& proxy, const cohort::test::s3_server& server) {
    auto config = server.config();
    config.endpoint = proxy.endpoint();
    return config;
  }
};

}  // namespace

TEST_CASE("objects put to an S3 server come back whole, by range, by HEAD and in paginated listings") {
  COHORT_NEED_S3_SERVER();
  cohort::test::s3_server server;
  const s3_client s3(server.config());
  const auto& b = server.bucket();
  const std::string bytes = random_bytes(100000, 1);
  s3.put_object(b, "runs/a b+c/obj.bin", bytes);
  CHECK(s3.get_object(b, "runs/a b+c/obj.bin") == bytes);
  CHECK(s3.get_range(b, "runs/a b+c/obj.bin", 1000, 10) == bytes.substr(1000, 10));
  const auto head = s3.head_object(b, "runs/a b+c/obj.bin");
  REQUIRE(head);
  CHECK(head->size == bytes.size());
  CHECK_FALSE(s3.head_object(b, "runs/absent"));

  for (int i = 0; i < 7; ++i) s3.put_object(b, "list/k" + std::to_string(i), std::string(i, 'x'));
  s3.put_object(b, "other/k", "y");
  const auto listed = s3.list_objects(b, "list/", 3);  // three pages
  REQUIRE(listed.size() == 7);
  for (int i = 0; i < 7; ++i) {
    CHECK(listed[i].key == "list/k" + std::to_string(i));
    CHECK(listed[i].size == static_cast<std::uint64_t>(i));
  }
  s3.delete_object(b, "list/k3");
  s3.delete_object(b, "list/never-there");
  CHECK(s3.list_objects(b, "list/").size() == 6);

  cohort::test::temp_dir dir;
  std::uint64_t received = 0;
  s3.get_to_file(b, "runs/a b+c/obj.bin", dir.path("copy.bin"), [&](std::uint64_t n) { received += n; });
  CHECK(cohort::test::read_file(dir.path("copy.bin")) == bytes);
  CHECK(received == bytes.size());
}

TEST_CASE("an S3 error names the operation, bucket and key, the status and S3's code") {
  COHORT_NEED_S3_SERVER();
  cohort::test::s3_server server;
  const s3_client s3(server.config());
  CHECK_THROWS_WITH(s3.get_object(server.bucket(), "no/such"),
                    Catch::Contains("GET s3://" + server.bucket() + "/no/such: 404 NoSuchKey"));
  auto wrong = server.config();
  wrong.credentials.access_key_id = "NOT-A-KEY";
  const s3_client bad(wrong);
  try {
    bad.put_object(server.bucket(), "k", "v");
    FAIL("an unknown access key was accepted");
  } catch (const s3_error& e) {
    CHECK(e.http_status() == 403);
    CHECK(e.code() == "InvalidAccessKeyId");
    CHECK_THAT(e.what(), Catch::Contains("PUT s3://" + server.bucket() + "/k: 403 InvalidAccessKeyId"));
  }
  CHECK_FALSE(s3.head_object(server.bucket(), "k"));
}

TEST_CASE("a file larger than a part goes up as a multipart upload, each part acknowledged with its bytes") {
  COHORT_NEED_S3_SERVER();
  cohort::test::s3_server server;
  const s3_client s3(server.config());
  cohort::test::temp_dir dir;
  const std::uint64_t part = 5ull << 20;
  const std::string bytes = random_bytes(2 * part + 12345, 2);
  const std::string path = dir.write("big.bin", bytes);
  std::vector<std::pair<int, std::uint64_t>> acknowledged;
  s3.upload_file(server.bucket(), "big/obj", path, part,
                 [&](int n, std::uint64_t bytes) { acknowledged.emplace_back(n, bytes); });
  CHECK(acknowledged == std::vector<std::pair<int, std::uint64_t>>{{1, part}, {2, part}, {3, 12345}});
  acknowledged.clear();
  const std::string small = dir.write("small.bin", "tiny");
  s3.upload_file(server.bucket(), "small/obj", small, part,
                 [&](int n, std::uint64_t bytes) { acknowledged.emplace_back(n, bytes); });
  CHECK(acknowledged == std::vector<std::pair<int, std::uint64_t>>{{1, 4}});
  CHECK(s3.head_object(server.bucket(), "big/obj")->size == bytes.size());
  CHECK(s3.get_object(server.bucket(), "big/obj") == bytes);
  CHECK(s3.get_range(server.bucket(), "big/obj", part - 5, 10) == bytes.substr(part - 5, 10));
}

TEST_CASE("a multipart upload sends several parts at once and still tells them in part order") {
  COHORT_NEED_S3_SERVER();
  proxied_server rig;
  auto& [server, proxy, s3] = rig;
  cohort::test::temp_dir dir;
  const std::uint64_t part = 5ull << 20;
  const std::string bytes = random_bytes(5 * part + 7, 4);
  const std::string path = dir.write("big.bin", bytes);
  // Parts 1-4 (at least) are held at the proxy until four are there at once: sent one at a
  // time, each would get through only after the 60 s, and the check below would fail.
  proxy.hold_until_together(4, "partNumber=", std::chrono::seconds(60));
  std::vector<std::pair<int, std::uint64_t>> acknowledged;
  s3.upload_file(server.bucket(), "parallel/obj", path, part,
                 [&](int n, std::uint64_t bytes) { acknowledged.emplace_back(n, bytes); });
  CHECK(proxy.held_together());
  CHECK(acknowledged == std::vector<std::pair<int, std::uint64_t>>{
                            {1, part}, {2, part}, {3, part}, {4, part}, {5, part}, {6, 7}});
  CHECK(s3.get_object(server.bucket(), "parallel/obj") == bytes);
}

TEST_CASE("a large object comes down in ranges, several at once, into one file; a smaller one whole") {
  COHORT_NEED_S3_SERVER();
  proxied_server rig;
  auto& [server, proxy, s3] = rig;
  cohort::test::temp_dir dir;
  const std::uint64_t range = 1ull << 20;
  const std::string bytes = random_bytes(6 * range + 99, 5);
  s3.put_object(server.bucket(), "ranges/obj", bytes);
  const auto listed = s3.list_objects(server.bucket(), "ranges/");
  REQUIRE(listed.size() == 1);
  // Ranges 1-4 (at least) are held at the proxy until four are there at once.
  proxy.hold_until_together(4, "GET /", std::chrono::seconds(60));
  std::vector<std::uint64_t> told;
  const std::string path = dir.path("obj");
  s3.get_to_file_in_ranges(
      server.bucket(), listed[0], path, [&](std::uint64_t n) { told.push_back(n); }, range);
  CHECK(proxy.held_together());
  CHECK(cohort::test::read_file(path) == bytes);
  CHECK(told == std::vector<std::uint64_t>{range, range, range, range, range, range, 99});
  std::size_t ranged = 0;
  for (const auto& e : proxy.exchanges()) ranged += e.range.empty() ? 0 : 1;
  CHECK(ranged == 7);
  // Smaller than a range: one GET, no range.
  proxy.clear();
  s3.put_object(server.bucket(), "ranges/small", "tiny");
  s3.get_to_file_in_ranges(server.bucket(), s3.list_objects(server.bucket(), "ranges/small")[0], path, {},
                           range);
  CHECK(cohort::test::read_file(path) == "tiny");
  const auto small = proxy.exchanges();
  REQUIRE(small.size() == 3);  // the PUT, the listing, then one GET
  CHECK(small[2].request_line.rfind("GET /", 0) == 0);
  CHECK(small[2].range.empty());
  // The object replaced after it was listed: the ranges asked for the listed version fail.
  s3.put_object(server.bucket(), "ranges/obj", random_bytes(6 * range + 99, 6));
  try {
    s3.get_to_file_in_ranges(server.bucket(), listed[0], path, {}, range);
    FAIL("ranges of another version were taken");
  } catch (const s3_error& e) {
    CHECK(e.http_status() == 412);
  }
}

TEST_CASE("an upload larger than 10,000 parts of the asked size carry takes larger parts, in whole MiB") {
  const std::uint64_t mib = 1ull << 20, part = 8 * mib;
  CHECK(multipart_part_size(0, part) == part);
  CHECK(multipart_part_size(max_upload_parts * part, part) == part);  // 78 GiB: exactly fits
  const std::uint64_t more = max_upload_parts * part + 1;
  CHECK(multipart_part_size(more, part) == 9 * mib);
  const std::uint64_t shard_13b = 13000000000ull * 12;  // fp32 weights and Adam moments of 13B
  const std::uint64_t size = multipart_part_size(shard_13b, part);
  CHECK(size % mib == 0);
  CHECK((shard_13b + size - 1) / size <= max_upload_parts);
  CHECK((shard_13b + (size - mib) - 1) / (size - mib) > max_upload_parts);  // the smallest that fits
}

TEST_CASE("a multipart upload cut off after a part leaves no object behind") {
  COHORT_NEED_S3_SERVER();
  cohort::test::s3_server server;
  const s3_client s3(server.config());
  cohort::test::temp_dir dir;
  const std::uint64_t part = 5ull << 20;
  const std::string path = dir.write("big.bin", random_bytes(2 * part + 1, 3));
  CHECK_THROWS_WITH(s3.upload_file(server.bucket(), "cut/obj", path, part,
                                   [](int n, std::uint64_t) {
                                     if (n == 2) throw std::runtime_error("killed after part 2");
                                   }),
                    "killed after part 2");
  CHECK_FALSE(s3.head_object(server.bucket(), "cut/obj"));
  CHECK(s3.list_objects(server.bucket(), "cut/").empty());
  CHECK_THROWS_WITH(s3.upload_file(server.bucket(), "cut/obj", path, 1 << 20),
                    Catch::Contains("part_size must be at least 5 MiB"));
}

TEST_CASE("a server that is not there is retried, then reported with the endpoint") {
  COHORT_NEED_S3_SERVER();
  std::string endpoint;
  s3_config c;
  {
    cohort::test::s3_server server;
    c = server.config();
    endpoint = server.endpoint();
  }  // killed: nothing listens on its port now
  c.max_attempts = 2;
  const s3_client s3(c);
  CHECK_THROWS_WITH(s3.get_object("cohort-test", "k"),
                    Catch::Contains("GET s3://cohort-test/k: no success after 2 attempts at " + endpoint));
}
