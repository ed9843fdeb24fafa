// A data set in S3 (a real s3rver on 127.0.0.1) streamed through a cache bounded in bytes: the
// same samples as the local copy in any order, the cache never above its budget, corrupt or
// missing shards named, and a budget below one shard refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <random>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/data/s3_shard_source.hpp"
#include "core/data/shard_writer.hpp"
#include "tests/support/files.hpp"
#include "tests/support/s3_server.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::data;
using cohort::test::temp_dir;
namespace fs = std::filesystem;
namespace storage = cohort::core::storage;

namespace {

// 200 samples of 1-9 tokens with a loss mask, in shards of about 150 tokens.
manifest write_local_set(const std::string& dir) {
  prepare_output_dir(dir);
  shard_writer_options o;
  o.vocab_size = 500;
  o.token_bytes = token_bytes_for_vocab(500);
  o.loss_mask = true;
  o.shard_tokens = 150;
  shard_writer w(dir, o);
  for (int i = 0; i < 200; ++i) {
    std::vector<std::int32_t> ids;
    std::vector<std::uint8_t> mask;
    for (int t = 0; t < 1 + i % 9; ++t) {
      ids.push_back((i * 37 + t) % 500);
      mask.push_back(t % 2);
    }
    w.append(ids.data(), static_cast<std::int64_t>(ids.size()), mask.data());
  }
  manifest base;
  base.kind = "sft";
  base.layout = "pad";
  base.tokenizer_identity = "test";
  base.seq_len = 16;
  base.eos_id = 2;
  return w.finish(base);
}

// Puts every file of the local data set under `prefix` in the bucket.
void upload_set(const storage::s3_client& s3, const std::string& bucket, const std::string& prefix,
                const std::string& dir) {
  for (const auto& f : fs::directory_iterator(dir))
    s3.put_object(bucket, prefix + "/" + f.path().filename().string(), cohort::test::read_file(f.path()));
}

std::uint64_t shard_bytes(const shard_info& s) {
  std::uint64_t n = 0;
  for (const auto& f : shard_files(s)) n += f.second->bytes;
  return n;
}

// 120 seq2seq samples: source of 1-7 tokens, target of 1-5, in shards of about 100 tokens.
manifest write_local_pairs(const std::string& dir) {
  prepare_output_dir(dir);
  shard_writer_options o;
  o.vocab_size = 500;
  o.target = true;
  o.shard_tokens = 100;
  shard_writer w(dir, o);
  for (int i = 0; i < 120; ++i) {
    const std::vector<std::int32_t> source(static_cast<std::size_t>(1 + i % 7), (i * 13) % 500);
    const std::vector<std::int32_t> target(static_cast<std::size_t>(1 + i % 5), (i * 7 + 1) % 500);
    w.append_pair(source.data(), static_cast<std::int64_t>(source.size()), target.data(),
                  static_cast<std::int64_t>(target.size()));
  }
  manifest base;
  base.layout = "pad";
  base.tokenizer_identity = "test";
  base.seq_len = 8;
  base.eos_id = 2;
  base.seq2seq = seq2seq_info{};
  base.seq2seq->target_len = 6;
  base.seq2seq->over_long = "truncate";
  return w.finish(base);
}

std::uint64_t files_bytes(const std::string& dir) {
  std::uint64_t n = 0;
  for (const auto& f : fs::directory_iterator(dir)) n += f.file_size();
  return n;
}

}  // namespace

TEST_CASE("a data set streamed from S3 through a small cache reads the same samples as its local copy",
          "[core][data][s3]") {
  COHORT_NEED_S3_SERVER();
  cohort::test::s3_server server;
  temp_dir tmp;
  const manifest m = write_local_set(tmp.path("local"));
  REQUIRE(m.shards.size() >= 4);
  auto s3 = std::make_shared<const storage::s3_client>(server.config());
  upload_set(*s3, server.bucket(), "sets/tiny", tmp.path("local"));

  std::uint64_t largest = 0;
  for (const auto& s : m.shards) largest = std::max(largest, shard_bytes(s));
  const std::uint64_t budget = 2 * largest;  // two shards at most
  auto source = std::make_shared<s3_shard_source>(s3, storage::parse_s3_url("s3://" + server.bucket() + "/sets/tiny", "t"),
                                                  tmp.path("cache"));
  const dataset remote(source, budget);
  const dataset local(tmp.path("local"));
  CHECK(remote.streamed());
  CHECK(remote.size() == local.size());
  CHECK(remote.cached_bytes() == 0);

  std::vector<std::int64_t> order(static_cast<std::size_t>(local.size()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  for (const auto i : order) {
    INFO("sample " << i);
    REQUIRE(remote.sample_tokens(i) == local.sample_tokens(i));
    REQUIRE(remote.sample_loss_mask(i) == local.sample_loss_mask(i));
    REQUIRE(remote.cached_bytes() <= budget);
    REQUIRE(files_bytes(tmp.path("cache")) <= budget);
  }
  CHECK(remote.shard_fetches() > m.shards.size());  // shards were dropped and fetched again
}

TEST_CASE("a seq2seq data set streamed from S3 reads the same sources and targets as its local copy",
          "[core][data][s3][seq2seq]") {
  COHORT_NEED_S3_SERVER();
  cohort::test::s3_server server;
  temp_dir tmp;
  const manifest m = write_local_pairs(tmp.path("local"));
  REQUIRE(m.shards.size() >= 4);
  auto s3 = std::make_shared<const storage::s3_client>(server.config());
  upload_set(*s3, server.bucket(), "sets/pairs", tmp.path("local"));
  std::uint64_t largest = 0;
  for (const auto& s : m.shards) largest = std::max(largest, shard_bytes(s));
  const auto url = storage::parse_s3_url("s3://" + server.bucket() + "/sets/pairs", "t");
  auto source = std::make_shared<s3_shard_source>(s3, url, tmp.path("cache"));
  const dataset remote(source, 2 * largest);
  const dataset local(tmp.path("local"));
  REQUIRE(remote.is_seq2seq());
  std::vector<std::int64_t> order(static_cast<std::size_t>(local.size()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(11));
  for (const auto i : order) {
    INFO("sample " << i);
    REQUIRE(remote.sample_tokens(i) == local.sample_tokens(i));
    REQUIRE(remote.target_tokens(i) == local.target_tokens(i));
    REQUIRE(files_bytes(tmp.path("cache")) <= 2 * largest);
  }
  CHECK(local.target_tokens(9) == std::vector<std::int64_t>(5, 64));
}

TEST_CASE("a streamed data set names a corrupt or missing shard object and refuses a cache below one shard",
          "[core][data][s3]") {
  COHORT_NEED_S3_SERVER();
  cohort::test::s3_server server;
  temp_dir tmp;
  const manifest m = write_local_set(tmp.path("local"));
  auto s3 = std::make_shared<const storage::s3_client>(server.config());
  upload_set(*s3, server.bucket(), "sets/tiny", tmp.path("local"));
  const auto url = storage::parse_s3_url("s3://" + server.bucket() + "/sets/tiny", "t");

  const std::string key = "sets/tiny/" + m.shards[0].name + ".tokens";
  std::string bytes = s3->get_object(server.bucket(), key);
  bytes[0] = static_cast<char>(bytes[0] ^ 1);
  s3->put_object(server.bucket(), key, bytes);
  const dataset corrupt(std::make_shared<s3_shard_source>(s3, url, tmp.path("cache-a")), 1 << 20);
  CHECK_THROWS_WITH(corrupt.sample_tokens(0), Catch::Contains("s3://" + server.bucket() + "/" + key) &&
                                                  Catch::Contains("XXH64 differs from the data set's manifest"));
  CHECK_FALSE(fs::exists(tmp.path("cache-a/" + m.shards[0].name + ".tokens")));

  s3->delete_object(server.bucket(), "sets/tiny/" + m.shards[1].name + ".index");
  const dataset missing(std::make_shared<s3_shard_source>(s3, url, tmp.path("cache-b")), 1 << 20);
  CHECK_THROWS_WITH(missing.sample_tokens(m.shards[0].samples),
                    Catch::Contains(m.shards[1].name + ".index: 404 NoSuchKey"));

  CHECK_THROWS_WITH(dataset(std::make_shared<s3_shard_source>(s3, url, tmp.path("cache-c")), 10),
                    Catch::Contains("(data.cache_bytes) cannot hold the largest shard's files"));
  const auto no_set = storage::parse_s3_url("s3://" + server.bucket() + "/sets/none", "t");
  CHECK_THROWS_WITH(dataset(std::make_shared<s3_shard_source>(s3, no_set, tmp.path("cache-d")), 1 << 20),
                    Catch::Contains("manifest.json: 404 NoSuchKey") && Catch::Contains("cohort-data build"));
}
