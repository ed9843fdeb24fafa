// `cohort-model tokenize`: ids as a JSON list on stdout, usage errors on stderr.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <sstream>

#include "tests/support/shared_data.hpp"
#include "tools/cohort-model/tokenize_command.hpp"

namespace {

struct captured {
  int status;
  std::string out, err;
};

captured run(std::vector<std::string> args) {
  args.insert(args.begin(), "tokenize");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  const int status = cohort::tools::run_tokenize_command(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {status, out.str(), err.str()};
}

}  // namespace

TEST_CASE("tokenize prints the ids of the text as a JSON list", "[core][tokenizer][tools]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  const auto r = run({"--tokenizer", cohort::test::shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"),
                      "--text", "Hello world"});
  CHECK(r.status == 0);
  CHECK(nlohmann::json::parse(r.out) == nlohmann::json({538, 286, 79, 507, 337}));
  const auto sp = run({"--tokenizer", cohort::test::shared_file("data/llama2-tokenizer.model"), "--text", "Hello",
                       "--add-bos", "--add-eos"});
  CHECK(sp.status == 0);
  CHECK(nlohmann::json::parse(sp.out) == nlohmann::json({1, 15043, 2}));
}

TEST_CASE("tokenize encodes and decodes with T5's Unigram tokenizer from its directory", "[core][tokenizer][tools]") {
  const std::string dir = std::string(COHORT_TOKENIZER_TEST_DATA) + "/t5-unigram";
  // transformers' ids for "Hello world." with add_special_tokens (tests/core/tokenizer/data/t5-unigram).
  const auto encoded = run({"--tokenizer", dir, "--text", "Hello world.", "--add-eos"});
  CHECK(encoded.status == 0);
  CHECK(nlohmann::json::parse(encoded.out) == nlohmann::json({159, 77, 10, 164, 20, 7, 13, 1}));
  const auto masked = run({"--tokenizer", dir + "/tokenizer.json", "--text", "<extra_id_0> masked"});
  CHECK(nlohmann::json::parse(masked.out) == nlohmann::json({409, 181, 5, 50, 45}));
  const auto decoded = run({"--tokenizer", dir, "--decode", "[159, 77, 10, 164, 20, 7, 13, 1]"});
  CHECK(decoded.status == 0);
  CHECK(nlohmann::json::parse(decoded.out) == "Hello world.</s>");
  const auto bos = run({"--tokenizer", dir, "--text", "x", "--add-bos"});
  CHECK(bos.status == 1);
  CHECK_THAT(bos.err, Catch::Contains("defines no BOS token"));
}

TEST_CASE("tokenize reports missing options and bad files", "[core][tokenizer][tools]") {
  const auto missing = run({"--text", "x"});
  CHECK(missing.status == 2);
  CHECK_THAT(missing.err, Catch::Contains("--tokenizer is required"));
  const auto bad = run({"--tokenizer", "/nonexistent/tokenizer.json", "--text", "x"});
  CHECK(bad.status == 1);
  CHECK_THAT(bad.err, Catch::Contains("no such tokenizer file"));
  CHECK(bad.out.empty());
}
