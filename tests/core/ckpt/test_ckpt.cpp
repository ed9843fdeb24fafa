// Checkpoint write, commit, list, verify, fallback and loading.
#include "tests/support/catch_torch.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/ckpt/base64.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/data/checksum.hpp"
#include "tests/core/ckpt/fake_checkpoint.hpp"
#include "tests/support/tool_run.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace cohort::core::ckpt;
using namespace cohort::core::ckpt::testing;
using cohort::test::temp_dir;

namespace {

std::string joined(const std::vector<rejected_checkpoint>& rejected) {
  std::string s;
  for (const auto& r : rejected) s += r.path + " -> " + r.reason + "\n";
  return s;
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x40));
}

// The forgery of issue 13: rank `rank`'s report with the slices of "params" and "moments" in its
// stored tensor "flat" swapped (as a store client swapped lm_head's param and exp_avg slices).
rank_report swap_slices(rank_report r) {
  reported_piece* params = nullptr;
  reported_piece* moments = nullptr;
  for (auto& p : r.pieces) {
    if (p.tensor == "params") params = &p;
    if (p.tensor == "moments") moments = &p;
  }
  REQUIRE(params != nullptr);
  REQUIRE(moments != nullptr);
  std::swap(params->piece.key_offset, moments->piece.key_offset);
  return r;
}

// Writes m as the committed manifest of dir, sealed consistently (as a committer that believed a
// forged report would have).
void seal_manifest(const std::string& dir, const manifest& m) {
  const std::string text = manifest_to_json(m).dump();
  write_file_durable((fs::path(dir) / "manifest.json").string(), text);
  write_file_durable((fs::path(dir) / "COMMITTED").string(),
                     nlohmann::json{{"step", m.step},
                                    {"manifest_xxh64", cohort::core::data::to_hex64(
                                                           cohort::core::data::xxh64(text.data(), text.size()))}}
                         .dump());
}

}  // namespace

TEST_CASE("A rank report that disagrees with the rank's file is refused at commit, naming rank, file and tensor",
          "[core][ckpt][security]") {
  temp_dir tmp;
  const std::string dir = step_dir(tmp.path(), 4);
  const rank_report r0 = write_fake_rank(dir, 4, 2, 0);
  const rank_report r1 = write_fake_rank(dir, 4, 2, 1);
  const auto refused = [&](const rank_report& forged, const std::string& tensor) {
    try {
      commit_checkpoint(dir, 4, 2, {r0, forged});
      FAIL("a forged report was committed");
    } catch (const ckpt_error& e) {
      CHECK(e.code() == ckpt_errc::bad_input);
      CHECK_THAT(e.what(), Catch::Contains("rank 1") && Catch::Contains("rank-00001.safetensors") &&
                               Catch::Contains("tensor '" + tensor + "'"));
    }
    CHECK_FALSE(fs::exists(fs::path(dir) / "COMMITTED"));
    CHECK_FALSE(fs::exists(fs::path(dir) / "manifest.json"));
  };
  refused(swap_slices(r1), "moments");  // the slices swapped inside the stored tensor
  rank_report other_key = r1;          // a slice read from another stored tensor of the same size
  for (auto& p : other_key.pieces)
    if (p.tensor == "step_count") p.piece.key = "flat";
  refused(other_key, "step_count");
  rank_report shifted = r1;  // a slice moved within its logical tensor
  for (auto& p : shifted.pieces)
    if (p.tensor == "params") p.piece.offset -= 1;
  refused(shifted, "params");
  rank_report dropped = r1;  // a slice left out (another rank's report could cover it)
  dropped.pieces.erase(dropped.pieces.begin());
  refused(dropped, r1.pieces.front().tensor);
  const manifest m = commit_checkpoint(dir, 4, 2, {r0, r1});  // the true reports commit
  CHECK(verify_checkpoint(dir).ok());
  CHECK(m.tensors.size() == 3);
}

TEST_CASE("verify refuses a committed manifest whose slices disagree with a rank's file, by name",
          "[core][ckpt][security]") {
  temp_dir tmp;
  const std::string dir = step_dir(tmp.path(), 6);
  const rank_report r0 = write_fake_rank(dir, 6, 2, 0);
  const rank_report r1 = write_fake_rank(dir, 6, 2, 1);
  manifest m = commit_checkpoint(dir, 6, 2, {r0, r1});
  REQUIRE(verify_checkpoint(dir).ok());
  // What a committer that believed the forged report of rank 1 would have sealed.
  const rank_report forged = swap_slices(r1);
  for (auto& t : m.tensors)
    for (auto& p : t.pieces)
      for (const auto& f : forged.pieces)
        if (p.rank == 1 && f.tensor == t.name) p = f.piece;
  seal_manifest(dir, m);
  REQUIRE(read_manifest(dir).step == 6);  // the manifest itself is sound and sealed
  const verify_result v = verify_checkpoint(dir);
  REQUIRE_FALSE(v.ok());
  std::string all;
  for (const auto& p : v.problems) all += p + "\n";
  INFO(all);
  CHECK_THAT(all, Catch::Contains("rank 1, tensor 'params'") && Catch::Contains("rank 1, tensor 'moments'") &&
                      Catch::Contains("rank-00001.safetensors"));
  CHECK_THAT(all, !Catch::Contains("rank 0,"));
  // Resuming picks the checkpoint before it, never this one.
  CHECK_FALSE(latest_valid(tmp.path()).checkpoint);
  const auto tool = cohort::test::run_tool("cohort-ckpt", "verify " + dir);
  CHECK(tool.code == 1);
  CHECK_THAT(tool.err, Catch::Contains("rank 1, tensor 'params'") && Catch::Contains("INVALID"));
}

TEST_CASE("Step directories are named with eight digits and parsed back", "[core][ckpt]") {
  CHECK(step_dir_name(200) == "step-00000200");
  CHECK(parse_step_dir_name("step-00000200") == std::optional<std::uint64_t>(200));
  CHECK_FALSE(parse_step_dir_name("step-12a"));
  CHECK_FALSE(parse_step_dir_name("other"));
  CHECK(rank_shard_name(3) == "rank-00003.safetensors");
}

TEST_CASE("Base64 round-trips binary bytes and rejects bad text", "[core][ckpt]") {
  for (const std::string& s : {std::string(), std::string("a"), std::string("ab"), std::string("abc", 3),
                              std::string("\0\xff\x10zz", 5)}) {
    CHECK(base64_decode(base64_encode(s), "test") == s);
  }
  CHECK(base64_encode("abcd") == "YWJjZA==");
  CHECK_THROWS_WITH(base64_decode("YW*j", "field rng"), Catch::Contains("field rng"));
  CHECK_THROWS_AS(base64_decode("abc", "x"), ckpt_error);
}

TEST_CASE("A two-rank checkpoint is written, committed, listed, verified and loaded", "[core][ckpt]") {
  temp_dir tmp;
  const std::string dir = step_dir(tmp.path(), 200);
  const manifest m = write_fake_checkpoint(dir, 200, 2, {{"loss", 1.5}});
  CHECK(fs::exists(fs::path(dir) / "COMMITTED"));
  CHECK(m.world_size == 2);
  CHECK(m.files.size() == 4);
  const logical_tensor* params = m.find("params");
  REQUIRE(params);
  CHECK(params->shape == std::vector<std::int64_t>{11});
  REQUIRE(params->pieces.size() == 2);
  CHECK(params->pieces[1].rank == 1);
  CHECK(params->pieces[1].offset == 6);
  CHECK(params->pieces[1].length == 5);
  CHECK(m.find("moments")->pieces[0].key_offset == 6);

  const auto listed = list_checkpoints(tmp.path());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].step == 200);
  CHECK(listed[0].bytes > 0);

  const verify_result v = verify_checkpoint(dir);
  INFO(v.problems.size());
  CHECK(v.ok());
  const manifest read = read_manifest(dir);
  CHECK(read.metrics["loss"] == 1.5);
  CHECK(manifest_to_json(read) == manifest_to_json(m));

  const rank_shard shard = load_rank_shard(dir, read, 1);
  CHECK(shard.state().step == 200);
  CHECK(shard.state().rng == std::string("rng\0state1", 10));
  CHECK(shard.state().sampler["position"] == 1600);
  CHECK(shard.state().scheduler["lr"] == Approx(0.2));
  REQUIRE(shard.nbytes("flat") == (5 + 3) * 4);
  std::vector<float> flat(8);
  shard.read("flat", flat.data());
  CHECK(flat[0] == params_at(200)[6]);
  CHECK(flat[5] == moments_at(200)[4]);
  CHECK_THROWS_WITH(shard.read("nope", flat.data()), Catch::Contains("no tensor 'nope'"));
  CHECK_THROWS_AS(load_rank_shard(dir, read, 2), ckpt_error);
}

TEST_CASE("Rank reports survive a JSON round trip to the committer", "[core][ckpt]") {
  temp_dir tmp;
  const std::string dir = step_dir(tmp.path(), 5);
  const rank_report r0 = write_fake_rank(dir, 5, 2, 0);
  const rank_report r1 = rank_report_from_json(rank_report_to_json(write_fake_rank(dir, 5, 2, 1)));
  CHECK(rank_report_to_json(rank_report_from_json(rank_report_to_json(r0))) == rank_report_to_json(r0));
  const manifest m = commit_checkpoint(dir, 5, 2, {r0, r1});
  CHECK(verify_checkpoint(dir).ok());
  CHECK_THROWS_AS(rank_report_from_json(nlohmann::json{{"rank", 0}}), ckpt_error);
}

TEST_CASE("Commit refuses missing ranks, wrong steps and slices that leave a gap", "[core][ckpt]") {
  temp_dir tmp;
  const std::string dir = step_dir(tmp.path(), 7);
  const rank_report r0 = write_fake_rank(dir, 7, 2, 0);
  CHECK_THROWS_WITH(commit_checkpoint(dir, 7, 2, {r0}), Catch::Contains("rank 1 has not reported"));
  CHECK_THROWS_WITH(commit_checkpoint(dir, 8, 1, {r0}), Catch::Contains("reported step 7"));
  // Rank 0 of 2 alone covers only half of "params": committing it as a world of 1 leaves a gap.
  rank_report alone = r0;
  CHECK_THROWS_WITH(commit_checkpoint(dir, 7, 1, {alone}), Catch::Contains("uncovered"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "COMMITTED"));
}

TEST_CASE("A checkpoint without COMMITTED is ignored and the previous one is used", "[core][ckpt]") {
  temp_dir tmp;
  write_fake_checkpoint(step_dir(tmp.path(), 10), 10, 2);
  write_fake_rank(step_dir(tmp.path(), 20), 20, 2, 0);
  write_fake_rank(step_dir(tmp.path(), 20), 20, 2, 1);
  const auto listed = list_checkpoints(tmp.path());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].step == 10);
  const latest_result latest = latest_valid(tmp.path());
  INFO(joined(latest.rejected));
  REQUIRE(latest.checkpoint);
  CHECK(latest.checkpoint->step == 10);
  REQUIRE(latest.rejected.size() == 1);
  CHECK(latest.rejected[0].path == step_dir(tmp.path(), 20));
  CHECK_THAT(latest.rejected[0].reason, Catch::Contains("no COMMITTED"));
  CHECK_THROWS_AS(read_manifest(step_dir(tmp.path(), 20)), ckpt_error);
}

TEST_CASE("A truncated shard is refused naming the file and the previous checkpoint is used", "[core][ckpt]") {
  temp_dir tmp;
  write_fake_checkpoint(step_dir(tmp.path(), 10), 10, 2);
  write_fake_checkpoint(step_dir(tmp.path(), 20), 20, 2);
  const fs::path shard = fs::path(step_dir(tmp.path(), 20)) / "rank-00001.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 3);
  const verify_result v = verify_checkpoint(step_dir(tmp.path(), 20));
  REQUIRE(v.problems.size() == 1);
  CHECK_THAT(v.problems[0], Catch::Contains("rank-00001.safetensors") && Catch::Contains("truncated"));
  const latest_result latest = latest_valid(tmp.path());
  REQUIRE(latest.checkpoint);
  CHECK(latest.checkpoint->step == 10);
  REQUIRE(latest.rejected.size() == 1);
  CHECK_THAT(latest.rejected[0].reason, Catch::Contains("truncated"));
}

TEST_CASE("One flipped byte is a checksum mismatch naming the file and the previous checkpoint is used",
          "[core][ckpt]") {
  temp_dir tmp;
  write_fake_checkpoint(step_dir(tmp.path(), 10), 10, 2);
  write_fake_checkpoint(step_dir(tmp.path(), 20), 20, 2);
  const fs::path shard = fs::path(step_dir(tmp.path(), 20)) / "rank-00000.safetensors";
  flip_byte(shard.string(), fs::file_size(shard) - 5);
  const latest_result latest = latest_valid(tmp.path());
  REQUIRE(latest.checkpoint);
  CHECK(latest.checkpoint->step == 10);
  REQUIRE(latest.rejected.size() == 1);
  CHECK_THAT(latest.rejected[0].reason, Catch::Contains("rank-00000.safetensors") && Catch::Contains("checksum mismatch"));
}

TEST_CASE("A missing or edited manifest makes the checkpoint invalid with a clear reason", "[core][ckpt]") {
  temp_dir tmp;
  write_fake_checkpoint(step_dir(tmp.path(), 10), 10, 1);
  write_fake_checkpoint(step_dir(tmp.path(), 20), 20, 1);
  write_fake_checkpoint(step_dir(tmp.path(), 30), 30, 1);
  fs::remove(fs::path(step_dir(tmp.path(), 30)) / "manifest.json");
  flip_byte((fs::path(step_dir(tmp.path(), 20)) / "manifest.json").string(), 10);
  const latest_result latest = latest_valid(tmp.path());
  REQUIRE(latest.checkpoint);
  CHECK(latest.checkpoint->step == 10);
  REQUIRE(latest.rejected.size() == 2);
  CHECK_THAT(latest.rejected[0].reason, Catch::Contains("manifest unreadable"));
  CHECK_THAT(latest.rejected[1].reason, Catch::Contains("manifest.json") && Catch::Contains("checksum mismatch"));
}

TEST_CASE("No valid checkpoint gives an empty result, not an error", "[core][ckpt]") {
  temp_dir tmp;
  CHECK(list_checkpoints(tmp.path()).empty());
  CHECK_FALSE(latest_valid(tmp.path()).checkpoint);
  const verify_result v = verify_checkpoint(tmp.path("nowhere"));
  REQUIRE(v.problems.size() == 1);
  CHECK_THAT(v.problems[0], Catch::Contains("nowhere: not a checkpoint directory"));
}

TEST_CASE("Malformed manifests are refused naming the field", "[core][ckpt]") {
  nlohmann::json j = {{"format_version", 1}, {"step", 3}, {"world_size", 2}, {"files", nlohmann::json::array()},
                      {"tensors", {{{"name", "w"}, {"dtype", "F32"}, {"shape", {4}},
                                    {"pieces", {{{"rank", 2}, {"key", "w"}, {"offset", 0}, {"length", 4}, {"key_offset", 0}}}}}}}};
  CHECK_THROWS_WITH(manifest_from_json(j, "m.json"), Catch::Contains("tensor 'w'") && Catch::Contains("world_size 2"));
  j["tensors"][0]["pieces"][0]["rank"] = 1;
  j["tensors"][0]["pieces"][0]["length"] = 5;
  CHECK_THROWS_WITH(manifest_from_json(j, "m.json"), Catch::Contains("runs past"));
  j["tensors"][0]["pieces"][0]["length"] = 4;
  CHECK_NOTHROW(manifest_from_json(j, "m.json"));
  j["tensors"][0]["dtype"] = "F31";
  CHECK_THROWS_WITH(manifest_from_json(j, "m.json"), Catch::Contains("unknown dtype 'F31'"));
  j["tensors"][0]["dtype"] = "F32";
  j["format_version"] = 9;
  CHECK_THROWS_WITH(manifest_from_json(j, "m.json"), Catch::Contains("format_version 9"));
}

TEST_CASE("A manifest that leaves out a rank's files fails verification naming the rank", "[core][ckpt]") {
  temp_dir tmp;
  const std::string dir = step_dir(tmp.path(), 3);
  const rank_report r0 = write_fake_rank(dir, 3, 2, 0);
  rank_report r1 = write_fake_rank(dir, 3, 2, 1);
  rank_report forgetful = r1;
  forgetful.files.erase(forgetful.files.begin());
  CHECK_THROWS_WITH(commit_checkpoint(dir, 3, 2, {r0, forgetful}),
                    Catch::Contains("rank 1 did not report its file rank-00001.safetensors"));
  // A manifest written by something else that lists no shard for rank 1, sealed consistently.
  manifest m = commit_checkpoint(dir, 3, 2, {r0, r1});
  m.files.erase(std::remove_if(m.files.begin(), m.files.end(),
                               [](const file_record& f) { return f.name == "rank-00001.safetensors"; }),
                m.files.end());
  const std::string text = manifest_to_json(m).dump();
  write_file_durable((fs::path(dir) / "manifest.json").string(), text);
  write_file_durable((fs::path(dir) / "COMMITTED").string(),
                     nlohmann::json{{"step", 3}, {"manifest_xxh64", cohort::core::data::to_hex64(
                                                                        cohort::core::data::xxh64(text.data(), text.size()))}}
                         .dump());
  const verify_result v = verify_checkpoint(dir);
  REQUIRE(v.problems.size() == 1);
  CHECK_THAT(v.problems[0], Catch::Contains("rank-00001.safetensors") && Catch::Contains("rank 1"));
}
