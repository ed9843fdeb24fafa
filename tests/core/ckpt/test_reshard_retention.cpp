// Re-sharded reads, retention, the async writer, and the cohort-ckpt tool.
#include "tests/support/catch_torch.hpp"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>

#include "core/ckpt/async_writer.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/ckpt/retention.hpp"
#include "tests/core/ckpt/fake_checkpoint.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tool_run.hpp"

namespace fs = std::filesystem;
using namespace cohort::core::ckpt;
using namespace cohort::core::ckpt::testing;
using cohort::test::run_tool;
using cohort::test::temp_dir;
using cohort::test::tool_result;

namespace {

std::vector<float> gather(reshard_reader& reader, const std::string& name, int world) {
  std::vector<float> out;
  for (int r = 0; r < world; ++r) {
    const std::string bytes = reader.read_partition(world, r).at(name);
    const std::size_t n = bytes.size() / 4;
    const std::size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, bytes.data(), bytes.size());
  }
  return out;
}

std::vector<std::uint64_t> committed_steps(const std::string& run) {
  std::vector<std::uint64_t> out;
  for (const auto& c : list_checkpoints(run)) out.push_back(c.step);
  return out;
}

}  // namespace

TEST_CASE("Even partition splits like ZeRO and covers every element once", "[core][ckpt]") {
  CHECK(even_partition(11, 4, 0).length == 3);
  CHECK(even_partition(11, 4, 3).offset == 9);
  CHECK(even_partition(11, 4, 3).length == 2);
  CHECK(even_partition(2, 4, 3).length == 0);
  CHECK_THROWS_AS(even_partition(5, 2, 2), ckpt_error);
}

TEST_CASE("Re-sharded reads from 2 to 4 and from 4 to 1 ranks give the same logical bytes", "[core][ckpt]") {
  temp_dir tmp;
  for (auto [from, to] : {std::pair<int, int>{2, 4}, {4, 1}, {2, 3}}) {
    const std::uint64_t step = static_cast<std::uint64_t>(from * 10 + to);
    const std::string dir = step_dir(tmp.path(), step);
    write_fake_checkpoint(dir, step, from);
    reshard_reader reader(dir, read_manifest(dir));
    CHECK(gather(reader, "params", to) == params_at(step));
    CHECK(gather(reader, "moments", to) == moments_at(step));
    const std::string count = reader.read_partition(1, 0).at("step_count");
    std::int64_t value = 0;
    std::memcpy(&value, count.data(), 8);
    CHECK(value == static_cast<std::int64_t>(step));
  }
  // An arbitrary range that crosses a rank boundary.
  const std::string dir = step_dir(tmp.path(), 24);
  reshard_reader reader(dir, read_manifest(dir));
  std::vector<float> mid(5);
  reader.read("params", 2, 5, mid.data());
  const std::vector<float> all = params_at(24);
  CHECK(mid == std::vector<float>(all.begin() + 2, all.begin() + 7));
  CHECK_THROWS_WITH(reader.read("params", 8, 5, mid.data()), Catch::Contains("runs past tensor 'params'"));
  CHECK_THROWS_WITH(reader.read("nothing", 0, 1, mid.data()), Catch::Contains("no logical tensor 'nothing'"));
}

TEST_CASE("Retention keeps exactly n of the newest and cleans dead incomplete directories", "[core][ckpt]") {
  temp_dir tmp;
  write_fake_rank(step_dir(tmp.path(), 1), 1, 1, 0);  // dead attempt, older than the newest committed
  for (std::uint64_t s = 2; s <= 6; ++s) write_fake_checkpoint(step_dir(tmp.path(), s), s, 1);
  write_fake_rank(step_dir(tmp.path(), 7), 7, 1, 0);  // being written right now
  retention_policy policy;
  policy.num_to_keep = 2;
  const retention_result r = apply_retention(tmp.path(), policy);
  CHECK(r.kept == std::vector<std::uint64_t>{5, 6});
  CHECK(r.deleted == std::vector<std::uint64_t>{2, 3, 4});
  CHECK(r.removed_incomplete == std::vector<std::string>{step_dir(tmp.path(), 1)});
  CHECK(committed_steps(tmp.path()) == std::vector<std::uint64_t>{5, 6});
  CHECK(fs::exists(step_dir(tmp.path(), 7)));

  policy.writer_running = false;
  apply_retention(tmp.path(), policy);
  CHECK_FALSE(fs::exists(step_dir(tmp.path(), 7)));
  CHECK(committed_steps(tmp.path()) == std::vector<std::uint64_t>{5, 6});
}

TEST_CASE("Retention keeps the best by score, the newest and the protected checkpoint", "[core][ckpt]") {
  const std::vector<double> losses = {0.5, 0.1, 0.9, 0.3, 0.8};  // steps 1..5
  auto fresh_run = [&](temp_dir& tmp) {
    for (std::uint64_t s = 1; s <= 5; ++s) {
      write_fake_checkpoint(step_dir(tmp.path(), s), s, 1, {{"loss", losses[s - 1]}});
    }
  };
  {
    temp_dir tmp;
    fresh_run(tmp);
    retention_policy policy;
    policy.num_to_keep = 3;
    policy.score_attribute = "loss";
    policy.score_order = "min";
    apply_retention(tmp.path(), policy);
    CHECK(committed_steps(tmp.path()) == std::vector<std::uint64_t>{2, 4, 5});  // newest 5, best 2 and 4
  }
  {
    temp_dir tmp;
    fresh_run(tmp);
    retention_policy policy;
    policy.num_to_keep = 2;
    policy.score_attribute = "loss";
    policy.score_order = "max";
    policy.protect_steps = {1};
    apply_retention(tmp.path(), policy);
    CHECK(committed_steps(tmp.path()) == std::vector<std::uint64_t>{1, 5});  // protected and newest fill n
  }
  {
    temp_dir tmp;
    fresh_run(tmp);
    retention_policy policy;
    policy.num_to_keep = 1;
    policy.score_order = "best";
    CHECK_THROWS_WITH(apply_retention(tmp.path(), policy), Catch::Contains("'max' or 'min'"));
    policy.score_order = "max";
    policy.num_to_keep = 0;
    apply_retention(tmp.path(), policy);
    CHECK(committed_steps(tmp.path()).size() == 5);
  }
}

TEST_CASE("The async writer returns before the write ends and the next submit waits for it", "[core][ckpt]") {
  temp_dir tmp;
  async_rank_writer writer;
  CHECK_FALSE(writer.wait());
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::mutex mu;
  std::vector<std::uint64_t> order;
  auto tensors = [](std::uint8_t fill) {
    return std::vector<owned_shard_tensor>{{"blob", "U8", {64}, std::vector<std::uint8_t>(64, fill), {}}};
  };
  rank_state s1;
  s1.step = 1;
  writer.submit(step_dir(tmp.path(), 1), 0, tensors(1), s1, [&](const rank_report& r) {
    opened.wait();  // hold the first write open until the test lets it finish
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(r.step);
  });
  CHECK(writer.busy());  // submit returned while the write is still running

  rank_state s2;
  s2.step = 2;
  auto second = std::async(std::launch::async, [&] {
    writer.submit(step_dir(tmp.path(), 2), 0, tensors(2), s2, [&](const rank_report& r) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(r.step);
    });
  });
  // The second submit must still be blocked on the first write.
  CHECK(second.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  gate.set_value();
  second.get();
  const auto report = writer.wait();
  REQUIRE(report);
  CHECK(report->step == 2);
  CHECK(order == std::vector<std::uint64_t>{1, 2});
  CHECK_FALSE(writer.busy());
  const manifest m = commit_checkpoint(step_dir(tmp.path(), 2), 2, 1, {*report});
  CHECK(verify_checkpoint(step_dir(tmp.path(), 2)).ok());
}

TEST_CASE("The async writer rethrows a failed write from wait", "[core][ckpt]") {
  temp_dir tmp;
  async_rank_writer writer;
  std::vector<owned_shard_tensor> bad{{"blob", "F32", {3}, std::vector<std::uint8_t>(5), {}}};
  writer.submit(step_dir(tmp.path(), 1), 0, std::move(bad), rank_state{});
  CHECK_THROWS_WITH(writer.wait(), Catch::Contains("tensor 'blob'") && Catch::Contains("need 12"));
}

TEST_CASE("cohort-ckpt verify names each problem and exits 1; ls lists steps", "[core][ckpt][tools]") {
  temp_dir tmp;
  for (std::uint64_t s : {10, 20, 30}) write_fake_checkpoint(step_dir(tmp.path(), s), s, 2, {{"loss", 0.5}});
  write_fake_rank(step_dir(tmp.path(), 40), 40, 2, 0);

  const tool_result good = run_tool("cohort-ckpt", "verify " + step_dir(tmp.path(), 10));
  CHECK(good.code == 0);
  CHECK_THAT(good.out, Catch::Contains("OK"));

  const tool_result uncommitted = run_tool("cohort-ckpt", "verify " + step_dir(tmp.path(), 40));
  CHECK(uncommitted.code == 1);
  CHECK_THAT(uncommitted.err, Catch::Contains("no COMMITTED"));

  const fs::path shard20 = fs::path(step_dir(tmp.path(), 20)) / "rank-00001.safetensors";
  fs::resize_file(shard20, fs::file_size(shard20) / 2);
  const tool_result truncated = run_tool("cohort-ckpt", "verify " + step_dir(tmp.path(), 20));
  CHECK(truncated.code == 1);
  CHECK_THAT(truncated.err, Catch::Contains("rank-00001.safetensors") && Catch::Contains("truncated"));

  const fs::path shard30 = fs::path(step_dir(tmp.path(), 30)) / "rank-00000.safetensors";
  {
    std::fstream f(shard30, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard30) - 1));
    f.put('\x7f');
  }
  const tool_result flipped = run_tool("cohort-ckpt", "verify " + step_dir(tmp.path(), 30));
  CHECK(flipped.code == 1);
  CHECK_THAT(flipped.err, Catch::Contains("rank-00000.safetensors") && Catch::Contains("checksum mismatch"));

  const tool_result ls = run_tool("cohort-ckpt", "ls " + tmp.str() + " --score loss");
  CHECK(ls.code == 0);
  CHECK_THAT(ls.out, Catch::Contains("40") && Catch::Contains("incomplete") && Catch::Contains("committed") &&
                         Catch::Contains("0.5"));
  CHECK(run_tool("cohort-ckpt", "frobnicate x").code == 2);
}
