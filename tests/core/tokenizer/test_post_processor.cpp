// A tokenizer.json's post-processor: the special tokens it puts around one sequence (post_process).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/core/tokenizer/tokenizer_test_support.hpp"
#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using nlohmann::json;
using Catch::Contains;
using ids = std::vector<tok::token_id>;

namespace {

// A byte-level BPE tokenizer ("ab" is 256) with `post` as its post_processor.
std::unique_ptr<tok::tokenizer> with_post_processor(const cohort::test::temp_dir& dir, const json& post) {
  json doc =
      cohort::test::byte_level_tokenizer_json({{"a", "b"}}, {{"type", "ByteLevel"}, {"add_prefix_space", false}});
  doc["post_processor"] = post;
  return tok::load_tokenizer(dir.write("tokenizer.json", doc.dump()));
}

json t5_post_processor() {
  const auto path = COHORT_TOKENIZER_TEST_DATA "/t5-unigram/tokenizer.json";
  return json::parse(cohort::test::read_file(path))["post_processor"];
}

}  // namespace

TEST_CASE("T5's TemplateProcessing appends </s> to one sequence, as transformers' ids do", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto t = with_post_processor(dir, t5_post_processor());
  CHECK(t->post_process(t->encode("ab")) == ids{256, 1});
  CHECK(t->post_process({}) == ids{1});
  // expected.json's first case: ids are ids_no_special with the post-processor's </s>.
  const auto expected = json::parse(cohort::test::read_file(COHORT_TOKENIZER_TEST_DATA "/t5-unigram/expected.json"));
  const auto& first = expected["cases"][0];
  CHECK(t->post_process(first["ids_no_special"].get<ids>()) == first["ids"].get<ids>());
}

TEST_CASE("Bert, Roberta, ByteLevel and Sequence post-processors give their tokens; none gives none",
          "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  CHECK(with_post_processor(dir, {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}})
            ->post_process({256}) == ids{101, 256, 102});
  CHECK(with_post_processor(dir, {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 0}}})
            ->post_process({256}) == ids{0, 256, 2});
  CHECK(with_post_processor(dir, {{"type", "ByteLevel"}, {"trim_offsets", true}})->post_process({256}) == ids{256});
  const json seq{{"type", "Sequence"},
                 {"processors", {{{"type", "ByteLevel"}, {"trim_offsets", true}}, t5_post_processor()}}};
  CHECK(with_post_processor(dir, seq)->post_process({256}) == ids{256, 1});
  CHECK(with_post_processor(dir, nullptr)->post_process({256}) == ids{256});
}

TEST_CASE("a malformed or unsupported post-processor is refused on loading, naming its field",
          "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json post = t5_post_processor();
  post["special_tokens"].erase("</s>");
  REQUIRE_THROWS_WITH(with_post_processor(dir, post),
                      Contains("post_processor TemplateProcessing single[1]") &&
                          Contains("\"</s>\" is not in \"special_tokens\""));
  post = t5_post_processor();
  post["single"] = json::array();
  REQUIRE_THROWS_WITH(with_post_processor(dir, post), Contains("lacks the sequence"));
  REQUIRE_THROWS_WITH(with_post_processor(dir, {{"type", "BertProcessing"}, {"sep", {"[SEP]"}}, {"cls", {"[CLS]", 1}}}),
                      Contains("\"sep\" must be [token, id]"));
  REQUIRE_THROWS_WITH(with_post_processor(dir, {{"type", "FancyProcessing"}}),
                      Contains("post_processor type \"FancyProcessing\" is not supported"));
}
