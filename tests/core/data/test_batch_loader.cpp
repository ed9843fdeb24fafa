// Tests of the batch loader: each rank's micro-batches, step by step.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "core/data/batch_loader.hpp"
#include "core/data/shard_writer.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::data;
using cohort::test::temp_dir;

namespace {

// Sample i: length 1 + i % 6 (<= seq_len 6), every token equal to i + 10; mask 1 on odd positions.
std::shared_ptr<const dataset> make_dataset(const temp_dir& tmp, int samples) {
  const auto dir = tmp.path("ds");
  prepare_output_dir(dir);
  shard_writer_options o;
  o.vocab_size = 1000;
  o.loss_mask = true;
  o.shard_tokens = 64;
  shard_writer w(dir, o);
  for (int i = 0; i < samples; ++i) {
    const std::vector<std::int32_t> ids(static_cast<std::size_t>(1 + i % 6), i + 10);
    std::vector<std::uint8_t> mask;
    for (std::size_t t = 0; t < ids.size(); ++t) mask.push_back(t % 2);
    w.append(ids.data(), static_cast<std::int64_t>(ids.size()), mask.data());
  }
  manifest m;
  m.kind = "sft";
  m.layout = "pad";
  m.seq_len = 6;
  m.pad_id = 0;
  m.eos_id = 2;
  w.finish(m);
  return std::make_shared<const dataset>(dir);
}

}  // namespace

TEST_CASE("micro-batches are (B, T) buffers of the sampler's samples, padded and masked", "[core][data]") {
  temp_dir tmp;
  const auto ds = make_dataset(tmp, 100);
  loader_options o;
  o.geometry = {2, 3, 2};
  o.rank = 1;
  o.seed = 9;
  batch_loader loader(ds, o);
  sampler s(100, 12, 9);
  CHECK(loader.steps_per_epoch() == 8);
  micro_batch mb;
  for (std::int64_t step = 0; step < 3; ++step) {
    for (std::int64_t m = 0; m < 2; ++m) {
      REQUIRE(loader.step() == step);
      REQUIRE(loader.micro() == m);
      loader.next(mb);
      CHECK(mb.sample_ids == s.micro_batch_samples(step, o.geometry, 1, m));
      REQUIRE(mb.tokens.size() == 3 * 6);
      for (std::int64_t b = 0; b < 3; ++b) {
        const auto id = mb.sample_ids[static_cast<std::size_t>(b)];
        const std::int64_t len = 1 + id % 6;
        CHECK(mb.lengths[static_cast<std::size_t>(b)] == len);
        for (std::int64_t t = 0; t < 6; ++t) {
          const auto k = static_cast<std::size_t>(b * 6 + t);
          CHECK(mb.tokens[k] == (t < len ? id + 10 : 0));
          CHECK(mb.loss_mask[k] == (t < len ? t % 2 : 0));
        }
      }
    }
  }
}

TEST_CASE("seeking to step K yields exactly what continuing from step 0 yields at K", "[core][data]") {
  temp_dir tmp;
  const auto ds = make_dataset(tmp, 100);
  loader_options o;
  o.geometry = {4, 2, 3};
  o.rank = 2;
  o.seed = 5;
  batch_loader from_start(ds, o), resumed(ds, o);
  micro_batch a, b;
  for (int i = 0; i < 13 * 3; ++i) from_start.next(a);  // 13 steps, crossing into epoch 2 at step 4
  resumed.seek(13);
  for (int i = 0; i < 3 * 3; ++i) {
    from_start.next(a);
    resumed.next(b);
    CHECK(a.step == b.step);
    CHECK(a.sample_ids == b.sample_ids);
    CHECK(a.tokens == b.tokens);
    CHECK(a.loss_mask == b.loss_mask);
  }
  CHECK_THROWS_AS(resumed.seek(-1), data_error);
}

TEST_CASE("a loader refuses a rank outside the world and a batch larger than the dataset", "[core][data]") {
  temp_dir tmp;
  const auto ds = make_dataset(tmp, 10);
  loader_options o;
  o.geometry = {2, 1, 1};
  o.rank = 2;
  CHECK_THROWS_WITH(batch_loader(ds, o), Catch::Contains("rank 2"));
  o.rank = 0;
  o.geometry = {2, 3, 2};
  CHECK_THROWS_WITH(batch_loader(ds, o), Catch::Contains("fewer than one global batch"));
}
