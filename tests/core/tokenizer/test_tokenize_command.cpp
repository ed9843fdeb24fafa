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
  const auto r = run({"--tokenizer", cohort::test::shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"),
                      "--text", "Hello world"});
  CHECK(r.status == 0);
  CHECK(nlohmann::json::parse(r.out) == nlohmann::json({538, 286, 79, 507, 337}));
  const auto sp = run({"--tokenizer", cohort::test::shared_file("data/llama2-tokenizer.model"), "--text", "Hello",
                       "--add-bos", "--add-eos"});
  CHECK(sp.status == 0);
  CHECK(nlohmann::json::parse(sp.out) == nlohmann::json({1, 15043, 2}));
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
