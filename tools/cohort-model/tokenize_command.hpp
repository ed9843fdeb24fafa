// `cohort-model tokenize`: prints the token ids of a text as a JSON list.
#pragma once

namespace cohort::tools {

// argv[0] is "tokenize"; options: --tokenizer FILE|DIR --text STRING [--add-bos] [--add-eos].
// Returns the process exit status (0 ok, 1 tokenizer error, 2 usage error).
int run_tokenize_command(int argc, char** argv);

}  // namespace cohort::tools
