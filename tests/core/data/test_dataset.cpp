// Tests of opening, reading and verifying token-shard datasets.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/checksum.hpp"
#include "core/data/dataset.hpp"
#include "core/data/shard_writer.hpp"
#include "core/data/verify.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::data;
using cohort::test::temp_dir;
namespace fs = std::filesystem;

namespace {

// Sample i has length 1 + i % 7, tokens (i * 31 + t) % vocab and mask bit t % 3 == 0.
std::vector<std::int32_t> sample_ids(int i, std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  for (int t = 0; t < 1 + i % 7; ++t) ids.push_back(static_cast<std::int32_t>((i * 31 + t) % vocab));
  return ids;
}

std::vector<std::uint8_t> sample_mask(int i) {
  std::vector<std::uint8_t> m;
  for (int t = 0; t < 1 + i % 7; ++t) m.push_back(t % 3 == 0);
  return m;
}

manifest write_dataset(const std::string& dir, int samples, std::int64_t vocab, bool mask, std::int64_t shard_tokens) {
  prepare_output_dir(dir);
  shard_writer_options o;
  o.vocab_size = vocab;
  o.token_bytes = token_bytes_for_vocab(vocab);
  o.loss_mask = mask;
  o.shard_tokens = shard_tokens;
  shard_writer w(dir, o);
  for (int i = 0; i < samples; ++i) {
    const auto ids = sample_ids(i, vocab);
    const auto m = sample_mask(i);
    w.append(ids.data(), static_cast<std::int64_t>(ids.size()), mask ? m.data() : nullptr);
  }
  manifest base;
  base.kind = mask ? "sft" : "pretrain";
  base.layout = "pad";
  base.tokenizer_identity = "test";
  base.seq_len = 8;
  base.eos_id = 2;
  return w.finish(base);
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x01));
}

}  // namespace

TEST_CASE("samples written across several shards read back exactly, with their loss masks", "[core][data]") {
  temp_dir tmp;
  for (std::int64_t vocab : {300, 100000}) {
    const auto dir = tmp.path("ds" + std::to_string(vocab));
    const auto m = write_dataset(dir, 500, vocab, true, 97);
    REQUIRE(m.shards.size() > 5);
    dataset ds(dir);
    CHECK(ds.info().token_bytes == (vocab > 65536 ? 4 : 2));
    REQUIRE(ds.size() == 500);
    std::int64_t total = 0;
    for (int i = 0; i < 500; ++i) {
      const auto expect = sample_ids(i, vocab);
      REQUIRE(ds.sample_tokens(i) == std::vector<std::int64_t>(expect.begin(), expect.end()));
      REQUIRE(ds.sample_loss_mask(i) == sample_mask(i));
      total += static_cast<std::int64_t>(expect.size());
    }
    CHECK(ds.info().tokens == total);
    CHECK(verify_dataset(dir).empty());
    CHECK_THROWS_AS(ds.sample_tokens(500), data_error);
  }
}

TEST_CASE("a dataset without a loss mask reads an all-ones mask", "[core][data]") {
  temp_dir tmp;
  write_dataset(tmp.path("ds"), 20, 300, false, 1000);
  dataset ds(tmp.path("ds"));
  CHECK_FALSE(ds.info().has_loss_mask);
  CHECK(ds.sample_loss_mask(6) == std::vector<std::uint8_t>(7, 1));
  CHECK(ds.info().loss_tokens == ds.info().tokens);
}

TEST_CASE("opening a dataset with a truncated shard fails and names the shard", "[core][data]") {
  temp_dir tmp;
  const auto dir = tmp.path("ds");
  write_dataset(dir, 200, 300, true, 100);
  const auto victim = dir + "/shard-00002.tokens";
  fs::resize_file(victim, fs::file_size(victim) - 2);
  try {
    dataset ds(dir);
    FAIL("opening a truncated dataset succeeded");
  } catch (const data_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("shard-00002.tokens") && Catch::Contains("truncated"));
  }
  const auto problems = verify_dataset(dir);
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].file, Catch::Contains("shard-00002.tokens"));
}

TEST_CASE("a missing shard file is named when the dataset is opened", "[core][data]") {
  temp_dir tmp;
  const auto dir = tmp.path("ds");
  write_dataset(dir, 200, 300, true, 100);
  fs::remove(dir + "/shard-00001.mask");
  CHECK_THROWS_WITH(dataset(dir), Catch::Contains("shard-00001.mask"));
}

TEST_CASE("verify names a shard whose bytes were corrupted in place", "[core][data]") {
  temp_dir tmp;
  const auto dir = tmp.path("ds");
  write_dataset(dir, 200, 300, true, 100);
  flip_byte(dir + "/shard-00003.tokens", 5);
  flip_byte(dir + "/shard-00001.mask", 0);
  dataset still_opens(dir);  // open checks sizes only: it must stay O(shards), not O(bytes)
  const auto problems = verify_dataset(dir);
  REQUIRE(problems.size() == 2);
  CHECK_THAT(problems[0].file, Catch::EndsWith("shard-00001.mask"));
  CHECK_THAT(problems[0].message, Catch::Contains("checksum mismatch"));
  CHECK_THAT(problems[1].file, Catch::EndsWith("shard-00003.tokens"));
}

TEST_CASE("a corrupt index that does not span its tokens is caught on open", "[core][data]") {
  temp_dir tmp;
  const auto dir = tmp.path("ds");
  write_dataset(dir, 50, 300, false, 1000);
  flip_byte(dir + "/shard-00000.index", 50 * 8 + 1);  // the last offset
  CHECK_THROWS_WITH(dataset(dir), Catch::Contains("shard-00000.index"));
}

TEST_CASE("a missing or malformed manifest gives an error naming manifest.json", "[core][data]") {
  temp_dir tmp;
  CHECK_THROWS_WITH(dataset(tmp.path()), Catch::Contains("manifest.json"));
  write_dataset(tmp.path("ds"), 5, 300, false, 1000);
  std::ofstream(tmp.path("ds/manifest.json")) << "{\"format\": \"cohort-token-shards\"";
  CHECK_THROWS_WITH(dataset(tmp.path("ds")), Catch::Contains("manifest.json") && Catch::Contains("JSON"));
  const auto problems = verify_dataset(tmp.path("ds"));
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].file, Catch::EndsWith("manifest.json"));
}

TEST_CASE("the writer refuses ids outside the vocabulary and an output dir holding other files", "[core][data]") {
  temp_dir tmp;
  prepare_output_dir(tmp.path("ds"));
  shard_writer_options o;
  o.vocab_size = 10;
  shard_writer w(tmp.path("ds"), o);
  const std::int32_t bad[] = {3, 10};
  CHECK_THROWS_WITH(w.append(bad, 2, nullptr), Catch::Contains("outside the vocabulary"));
  tmp.write("ds/notes.txt", "mine");
  CHECK_THROWS_WITH(prepare_output_dir(tmp.path("ds")), Catch::Contains("notes.txt"));
  CHECK(fs::exists(tmp.path("ds/notes.txt")));
}

TEST_CASE("rebuilding into a previous dataset's directory replaces it", "[core][data]") {
  temp_dir tmp;
  write_dataset(tmp.path("ds"), 300, 300, true, 50);
  write_dataset(tmp.path("ds"), 10, 300, false, 1000);
  dataset ds(tmp.path("ds"));
  CHECK(ds.size() == 10);
  CHECK_FALSE(fs::exists(tmp.path("ds/shard-00001.tokens")));
  CHECK(verify_dataset(tmp.path("ds")).empty());
}

namespace {

std::string file_xxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return to_hex64(xxh64(bytes.data(), bytes.size()));
}

}  // namespace

TEST_CASE("the pre-training check names a shard with flipped bytes, the digest expected and the one found",
          "[core][data]") {
  temp_dir tmp;
  const auto dir = tmp.path("ds");
  const manifest m = write_dataset(dir, 400, 300, true, 100);
  REQUIRE(m.shards.size() > 4);
  const std::string victim = dir + "/shard-00003.tokens";
  for (std::uint64_t b = 0; b < 64; ++b) flip_byte(victim, 2 * b);  // low bytes: ids stay in vocabulary
  const std::string expected = m.shards[3].tokens_file.xxh64;
  const std::string actual = file_xxh64(victim);
  REQUIRE(expected != actual);
  for (const int threads : {1, 4}) {
    try {
      verify_checksums(dir, threads);
      FAIL("a corrupt shard passed the pre-training check on " << threads << " threads");
    } catch (const data_error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith(victim) && Catch::Contains("checksum mismatch") &&
                               Catch::Contains("expects xxh64 " + expected) &&
                               Catch::Contains("the file has " + actual));
    }
  }
  dataset still_opens(dir);  // only the checksum sees it: the ids are all in range
}

TEST_CASE("a good data set passes the pre-training check, which covers every shard file", "[core][data]") {
  temp_dir tmp;
  const auto dir = tmp.path("ds");
  const manifest m = write_dataset(dir, 400, 300, true, 100);
  std::uint64_t bytes = 0;
  for (const auto& s : m.shards) bytes += s.tokens_file.bytes + s.index_file.bytes + s.mask_file->bytes;
  for (const int threads : {1, 3, 64}) {
    const checksum_summary summary = verify_checksums(dir, threads);
    CHECK(summary.files == 3 * m.shards.size());
    CHECK(summary.bytes == bytes);
  }
  // A damaged index or mask counts as much as a damaged tokens file; the first in manifest order wins.
  flip_byte(dir + "/shard-00004.mask", 0);
  flip_byte(dir + "/shard-00002.index", 3);
  CHECK_THROWS_WITH(verify_checksums(dir, 8), Catch::StartsWith(dir + "/shard-00002.index"));
}

TEST_CASE("an id outside the vocabulary names the shard file and its offset when a sample is read",
          "[core][data]") {
  temp_dir tmp;
  const auto dir = tmp.path("ds");
  const manifest m = write_dataset(dir, 200, 300, false, 100);
  REQUIRE(m.token_bytes == 2);
  const std::uint64_t token = 3;  // inside the first sample of shard 1 (every sample has >= 1 token)
  {
    std::fstream f(dir + "/shard-00001.tokens", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(token * 2));
    const char id[2] = {static_cast<char>(0xE8), static_cast<char>(0x03)};  // 1000, little-endian
    f.write(id, 2);
  }
  dataset ds(dir);
  std::int64_t failed_at = -1;
  std::string why;
  for (std::int64_t i = 0; i < ds.size() && failed_at < 0; ++i) {
    try {
      ds.sample_tokens(i);
    } catch (const data_error& e) {
      failed_at = i;
      why = e.what();
    }
  }
  // Shard 0's samples read fine; the first sample of shard 1 that holds token 3 fails.
  CHECK(failed_at >= m.shards[0].samples);
  CHECK(failed_at < m.shards[0].samples + m.shards[1].samples);
  CHECK_THAT(why, Catch::StartsWith(dir + "/shard-00001.tokens") && Catch::Contains("token id 1000") &&
                      Catch::Contains("token offset 3 (byte offset 6") && Catch::Contains("vocab_size 300"));
}
