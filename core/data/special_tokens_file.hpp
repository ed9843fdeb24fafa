// The special-tokens file a user hands to `cohort-data build --special-tokens` and to a job's
// model.added_tokens: {"tokens": ["<USER>", "<ASSISTANT>", ...]}. Torch- and tokenizer-free, so
// the training engine reads it too.
#pragma once

#include <string>
#include <vector>

namespace cohort::core::data {

// The tokens of the file at `path`, in order. `what` names where the path came from in errors
// ("--special-tokens"; empty: the path alone): data_error "<what> <path>: ..." for a file that
// cannot be read, is not JSON, or is not {"tokens": [non-empty strings]}.
std::vector<std::string> read_special_tokens_file(const std::string& path, const std::string& what);

}  // namespace cohort::core::data
