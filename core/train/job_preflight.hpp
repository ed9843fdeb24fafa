// Checks of a job's input that need more than its spec but are cheap (milliseconds, no torch):
// run by `submit` and by the head when they accept a job, so that input no restart can fix is
// refused before the first attempt. A worker meets the same errors when it sets up; they fail
// the job at once as bad input (see workload.hpp).
#pragma once

#include <memory>
#include <string>

#include "config/job_spec.hpp"

namespace cohort::core::data {
class dataset;
}

namespace cohort::core::train {

// Whether a causal_lm job's model is a T5 (config.json's model_type "t5", read from model.hf_dir
// (only config.json when it is in S3), model.config or the inline config): the job then trains an
// encoder-decoder on seq2seq data (seq2seq_engine). A config not readable here counts as a decoder's (the
// model's loading tells).
bool is_t5_job(const config::job_spec& spec);

// The model and training data set of a causal_lm job. A T5 (is_t5_job) needs model.hf_dir and
// refuses model.lora, train.path "fused" and train.activation_checkpointing. When data.train
// exists here, it must be a token-shard directory whose manifest.json reads, seq2seq for a T5 and
// not seq2seq for a decoder, holding at least one global batch (micro_batch_size × grad_accum ×
// num_workers samples), and built with the special tokens of model.added_tokens where that file
// exists here (check_added_tokens). A path that does not exist here is skipped (it may exist on the workers
// only). Throws config::spec_error naming the field, the file and what is allowed.
void check_data_set(const config::job_spec& spec);

// The data sets' files as a worker sees them, checked before the rank joins its group (so a rank
// that fails here fails alone, before any peer waits on it): data.train and data.eval (when set)
// open with every shard file present, are of the model's kind (seq2seq for a T5, else not), and with data.verify (the
// default) each shard's XXH64 matches the manifest (on up to 8 threads). Throws data::data_error
// naming the file (config::spec_error for a seq2seq set) for data.train, std::invalid_argument
// "data.eval: ..." for data.eval. Reads every byte with
// data.verify: workers only, never submit or the head. data.train in S3 is skipped here: the
// engine's streamed data set checks each shard's files when it fetches them.
void verify_data_files(const config::job_spec& spec);

// Rank `rank`'s view of data.train: the directory, or the S3 data set streamed through
// data.cache_dir/rank-<rank> (default: cohort-data-cache/BUCKET/PREFIX in the temp directory), at
// most data.cache_bytes (data::open_dataset).
std::shared_ptr<const data::dataset> open_train_data(const config::job_spec& spec, int rank);

// One data set's shard files against its manifest's XXH64s (data::verify_checksums) on up to 8
// threads of the caller's own. Throws data::data_error naming the first bad file.
void verify_data_checksums(const std::string& dir);

// The spec of a job about to be submitted, with what can be checked before its first attempt: a
// spec over the size and depth limits, a missing model or data set, a data set that is not one
// or too small for one global batch (where data.train is visible here). Throws
// config::spec_error naming the file or field.
config::job_spec load_runnable_spec(const std::string& path);

}  // namespace cohort::core::train
