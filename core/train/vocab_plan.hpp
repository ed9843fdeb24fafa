// The vocabulary a job trains: the model's vocab_size, grown to data.train's when the job adds the
// data set's special tokens (model.added_tokens) and rounded up to model.pad_vocab_to_multiple_of,
// and the added tokens' ids that the export writes into the tokenizer files. Torch-free: the
// engines plan with it and `submit` and the head check a job's added tokens with it.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "core/data/format.hpp"

namespace cohort::core::train {

struct vocab_plan {
  std::int64_t model_vocab = 0;  // config.json's vocab_size
  std::int64_t vocab = 0;        // the rows the job trains, checkpoints and exports
  bool grown() const { return vocab != model_vocab; }
};

// Checks model.added_tokens against data.train's manifest `train` (of directory `dir`): the file
// reads and lists the data set's special tokens, in the order `cohort-data build --special-tokens`
// added them, and the manifest records their ids. Nothing to check without model.added_tokens.
// Throws config::spec_error (path model.added_tokens) naming the file, the data set and the fix
// (rebuild with `cohort-data build --special-tokens FILE`).
void check_added_tokens(const config::job_spec& spec, const data::manifest& train, const std::string& dir);

// The vocabulary of a job whose model has `model_vocab` ids, on data.train `train` (and data.eval
// `eval`, or null): max(model_vocab, train's vocab_size) rounded up to a multiple of
// model.pad_vocab_to_multiple_of when the job has model.added_tokens (check_added_tokens), else
// model_vocab rounded so. Throws what check_added_tokens throws, and std::invalid_argument naming
// the data set's field when its ids exceed what the model would have (without
// model.added_tokens: naming it as the way to grow).
vocab_plan plan_vocab(const config::job_spec& spec, std::int64_t model_vocab, const data::manifest& train,
                      const data::manifest* eval);

// The data set's added tokens as a checkpoint records them for its export:
// [{"id": 128, "content": "<USER>"}, ...] in the manifest's order; [] when it records no ids.
nlohmann::json added_tokens_json(const data::manifest& m);

}  // namespace cohort::core::train
