// plan_vocab, check_added_tokens and added_tokens_json (vocab_plan.hpp).
#include "core/train/vocab_plan.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/data/special_tokens_file.hpp"

namespace cohort::core::train {
namespace {

std::string token_list(const std::vector<std::string>& tokens) {
  return nlohmann::json(tokens).dump();
}

// n rounded up to a multiple of `multiple` (>= 1).
std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  const std::int64_t m = std::max<std::int64_t>(1, multiple);
  return (n + m - 1) / m * m;
}

}  // namespace

void check_added_tokens(const config::job_spec& spec, const data::manifest& train, const std::string& dir) {
  const std::string& file = spec.model.added_tokens;
  if (file.empty()) return;
  const std::string field = "model.added_tokens";
  std::vector<std::string> tokens;
  try {
    tokens = data::read_special_tokens_file(file, "");
  } catch (const data::data_error& e) {  // "FILE: ..."
    throw config::spec_error(field, std::string(e.what()) + " (the file given to `cohort-data build --special-tokens`)");
  }
  const std::string rebuild = "; rebuild data.train with `cohort-data build --special-tokens " + file + " ...`";
  if (tokens != train.special_tokens)
    throw config::spec_error(field, file + " lists " + token_list(tokens) + ", but data.train \"" + dir +
                                        "\" was built with the special tokens " + token_list(train.special_tokens) +
                                        " (its manifest's special_tokens); the model must add the tokens the data "
                                        "set's ids use, in the same order" + rebuild);
  if (train.special_token_ids.size() != train.special_tokens.size())
    throw config::spec_error(field, "data.train \"" + dir + "\" records its special tokens but not their ids (built "
                                    "by an older cohort-data), which the export's tokenizer files need" + rebuild);
}

vocab_plan plan_vocab(const config::job_spec& spec, std::int64_t model_vocab, const data::manifest& train,
                      const data::manifest* eval) {
  vocab_plan plan;
  plan.model_vocab = model_vocab;
  const bool adding = !spec.model.added_tokens.empty();
  if (adding) check_added_tokens(spec, train, spec.data.train);
  // A vocabulary never shrinks: a data set of fewer ids keeps every row of the model.
  plan.vocab = round_up(adding ? std::max(model_vocab, train.vocab_size) : model_vocab,
                        spec.model.pad_vocab_to_multiple_of);
  if (train.vocab_size > plan.vocab) {
    std::string fix;
    if (!train.special_tokens.empty())
      fix = "; it was built with the special tokens " + token_list(train.special_tokens) +
            ": give their file (the one of `cohort-data build --special-tokens`) as model.added_tokens to grow the "
            "model's embedding and LM head to the data set's vocabulary";
    throw std::invalid_argument("data.train: the data set's vocabulary (" + std::to_string(train.vocab_size) +
                                " ids) exceeds the model's vocab_size " + std::to_string(model_vocab) + fix);
  }
  if (eval && eval->vocab_size > plan.vocab)
    throw std::invalid_argument("data.eval: the data set's vocabulary (" + std::to_string(eval->vocab_size) +
                                " ids) exceeds the model's vocab_size " + std::to_string(plan.vocab) +
                                (plan.grown() ? " (grown for model.added_tokens)" : "") +
                                "; build it with the tokenizer and special tokens of data.train");
  return plan;
}

nlohmann::json added_tokens_json(const data::manifest& m) {
  nlohmann::json out = nlohmann::json::array();
  if (m.special_token_ids.size() != m.special_tokens.size()) return out;
  for (std::size_t i = 0; i < m.special_tokens.size(); ++i)
    out.push_back({{"id", m.special_token_ids[i]}, {"content", m.special_tokens[i]}});
  return out;
}

}  // namespace cohort::core::train
