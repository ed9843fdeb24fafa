// Growing a model's vocabulary for added tokens, as transformers' resize_token_embeddings(n,
// pad_to_multiple_of) does with its default mean_resizing: the token embedding, an untied LM head
// and a head bias get rows for the new ids (a tied head grows once, with its embedding), and each
// new row (padding rows too) starts at the mean of the old rows. transformers draws the new rows
// of the embedding and head from a normal around that mean with 1e-9 times the old rows'
// covariance (and the bias around its mean with 1e-9 times its deviation) when the covariance is
// positive definite: noise of ~3e-5 of the rows' spread (on the test fixtures up to 3e-5 from the
// mean). cohort takes the mean itself: deterministic, the same on every rank and world size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/decoder.hpp"
#include "core/model/hf_layout.hpp"
#include "core/model/weight_source.hpp"

namespace cohort::core::model {

// `params` (the hf_parameters() of a model whose vocabulary grew; meta tensors will do) read from
// the Hugging Face directory `dir`, whose model has `old_vocab` ids: every weight as
// open_hf_weights reads it, except that the vocabulary weights' (is_vocab_parameter) rows from old_vocab on are the
// mean of their rows below it. The mean is computed (in fp64, from the directory's values) the
// first time a new row is read, once, by whichever thread reads it; a rank whose slices hold no
// new row never reads the whole old weight. Throws model_error (bad_input) when a vocabulary
// weight has fewer than old_vocab rows, and what open_hf_weights throws (a directory whose
// weights are not old_vocab rows is refused naming the file and tensor).
std::unique_ptr<weight_source> open_resized_hf_weights(const hf_files& dir,
                                                       const std::vector<hf_parameter>& params,
                                                       std::int64_t old_vocab);
std::unique_ptr<weight_source> open_resized_hf_weights(const std::string& dir,  // a local directory
                                                       const std::vector<hf_parameter>& params,
                                                       std::int64_t old_vocab);

}  // namespace cohort::core::model
