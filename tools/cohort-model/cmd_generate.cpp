// cohort-model generate: the tokens (and text) a model produces after a prompt, with a KV cache.
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/model_error.hpp"
#include "core/model/runner.hpp"
#include "core/proc/child_process.hpp"
#include "tools/cohort-model/commands.hpp"

namespace po = boost::program_options;
using cohort::core::model::model_errc;
using cohort::core::model::model_error;

namespace cohort::tools {
namespace {

constexpr const char* synopsis =
    "cohort-model generate --hf-dir DIR (--input-ids '[ID, ...]'|FILE | (--prompt TEXT | --prompts FILE) "
    "[--add-bos])\n"
    "       [--max-new-tokens N] [--greedy | --top-k K --top-p P --temperature T --seed S]\n"
    "       [--device cpu|cuda|cuda:N] [--dtype fp32|bf16|fp16] [--batch N] [--stats]\n"
    "       [--ignore-eos] [--json]";

// Runs cohort-tokenize (beside this program: the tokenizers cannot share a process with
// libtorch) and returns its one line of output; its error message becomes a model_error.
std::string run_tokenizer(const std::vector<std::string>& args) {
  const auto program = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cohort-tokenize";
  std::vector<std::string> argv{program.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::mutex m;
  std::condition_variable cv;
  std::string out;
  bool ended = false;
  core::proc::exit_status status;
  {
    core::proc::child_process child(
        argv, {}, [&](const std::string& line) {
          std::lock_guard<std::mutex> lock(m);
          out += line + "\n";
        },
        [&](const core::proc::exit_status& s) {
          std::lock_guard<std::mutex> lock(m);
          status = s;
          ended = true;
          cv.notify_all();
        });
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return ended; });
  }
  if (!status.success())
    throw model_error(model_errc::bad_input, "cohort-tokenize " + status.describe() + ": " + out);
  return out;
}

std::vector<std::int64_t> parse_id_list(const nlohmann::json& list, const std::string& where) {
  std::vector<std::int64_t> ids;
  if (!list.is_array() || list.empty())
    throw model_error(model_errc::bad_input, where + ": expected a non-empty JSON list of token ids");
  for (const auto& v : list) {
    if (!v.is_number_integer()) throw model_error(model_errc::bad_input, where + ": holds a non-integer token id");
    ids.push_back(v.get<std::int64_t>());
  }
  return ids;
}

// One prompt's ids ([ID, ...]), several prompts' ([[ID, ...], ...]) or eval's file's
// ({"input_ids": [[ID, ...], ...]}).
std::vector<std::vector<std::int64_t>> parse_prompt_rows(const nlohmann::json& j, const std::string& where) {
  const bool eval_file = j.is_object() && j.contains("input_ids");
  const auto& rows = eval_file ? j["input_ids"] : j;
  if (!rows.is_array() || rows.empty() || (eval_file && !rows[0].is_array()))
    throw model_error(model_errc::bad_input,
                      where +
                          ": expected a non-empty JSON list of token ids, a list of such "
                          "lists, or {\"input_ids\": [[...], ...]}");
  if (!rows[0].is_array()) return {parse_id_list(rows, where)};
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < rows.size(); ++i)
    out.push_back(parse_id_list(rows[i], where + " row " + std::to_string(i)));
  return out;
}

// --input-ids: inline JSON, or a file holding it (parse_prompt_rows).
std::vector<std::vector<std::int64_t>> read_prompt_ids(const std::string& value) {
  const auto inline_list = nlohmann::json::parse(value, nullptr, false);
  if (!inline_list.is_discarded()) return parse_prompt_rows(inline_list, "--input-ids");
  std::ifstream in(value);
  if (!in)
    throw model_error(model_errc::bad_input,
                      "--input-ids: '" + value + "' is neither a JSON list of token ids nor a readable file");
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) throw model_error(model_errc::bad_input, value + ": not JSON");
  return parse_prompt_rows(j, value);
}

bool has_tokenizer(const std::string& dir) {
  return std::filesystem::exists(dir + "/tokenizer.json") || std::filesystem::exists(dir + "/tokenizer.model");
}

// The prompts as token ids: --input-ids, --prompt, or each line of --prompts (text, encoded with
// the directory's tokenizer).
std::vector<std::vector<std::int64_t>> prompt_ids(const po::variables_map& vm, const std::string& dir,
                                                  bool tokenizer) {
  if (vm.count("input-ids")) return read_prompt_ids(vm["input-ids"].as<std::string>());
  std::vector<std::string> texts;
  if (vm.count("prompt")) {
    texts.push_back(vm["prompt"].as<std::string>());
  } else {
    const auto path = vm["prompts"].as<std::string>();
    std::ifstream in(path);
    if (!in) throw model_error(model_errc::bad_input, "--prompts: cannot read " + path);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
    if (texts.empty()) throw model_error(model_errc::bad_input, "--prompts: " + path + " holds no prompt (one per line)");
  }
  if (!tokenizer)
    throw model_error(model_errc::bad_input, dir + " has no tokenizer.json or tokenizer.model; give --input-ids");
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& text : texts) {
    std::vector<std::string> tokenize{"--tokenizer", dir, "--text", text};
    if (vm.count("add-bos")) tokenize.push_back("--add-bos");
    out.push_back(parse_id_list(nlohmann::json::parse(run_tokenizer(tokenize), nullptr, false),
                                "cohort-tokenize's output"));
  }
  return out;
}

// Prints one result: --json's object, else the text (with --prompts up to its first line break,
// so that each answer is one line), else the ids.
void print_result(const std::string& dir, bool tokenizer, bool json, bool one_line,
                  const std::vector<std::int64_t>& tokens) {
  nlohmann::json text = nullptr;
  if (tokenizer) {
    const auto decoded = nlohmann::json::parse(
        run_tokenizer({"--tokenizer", dir, "--decode", nlohmann::json(tokens).dump()}), nullptr, false);
    if (!decoded.is_string()) throw std::runtime_error("cohort-tokenize --decode printed no JSON string");
    text = decoded;
  }
  if (json) {
    std::cout << nlohmann::json{{"new_tokens", tokens}, {"text", text}}.dump() << "\n";
  } else if (tokenizer) {
    auto t = text.get<std::string>();
    if (one_line) t = t.substr(0, t.find('\n'));
    std::cout << t << "\n";
  } else {
    std::cout << nlohmann::json(tokens).dump() << "\n";
  }
}

// --stats: one batch's figures as a JSON line on stderr.
void print_stats(const core::model::generation_stats& st) {
  const double seconds = st.prefill_s + st.decode_s;
  std::cerr << nlohmann::json{{"rows", st.rows},
                              {"prompt_tokens", st.prompt_tokens},
                              {"new_tokens", st.new_tokens},
                              {"prefill_s", st.prefill_s},
                              {"decode_s", st.decode_s},
                              {"new_tokens_per_s", seconds > 0 ? st.new_tokens / seconds : 0.0},
                              {"cuda_graph", st.cuda_graph}}
                   .dump()
            << std::endl;
}

}  // namespace

int run_generate(const arg_list& args) {
  std::string dir;
  core::model::generation_placement placement;
  core::model::sampling_settings s;
  s.greedy = false;
  s.top_k = 50;  // transformers' defaults for sampling
  po::options_description desc("generate options");
  desc.add_options()("hf-dir", po::value(&dir)->required(), "Hugging Face model directory (a run's export)")(
      "input-ids", po::value<std::string>(), "the prompt's token ids: a JSON list, or a file holding one")(
      "prompt", po::value<std::string>(), "the prompt as text, encoded with the directory's tokenizer")(
      "prompts", po::value<std::string>(),
      "a file of text prompts, one per line (blank lines skipped): the model is loaded once and "
      "each answer printed on a line of its own (up to its first line break; --json: one object "
      "per line)")("add-bos", "with --prompt or --prompts: put the tokenizer's BOS token first")(
      "max-new-tokens", po::value(&s.max_new_tokens)->default_value(32), "tokens to produce at most")(
      "greedy", "take the most likely token each step (no sampling options then)")(
      "top-k", po::value(&s.top_k)->default_value(50), "sample among the k most likely tokens (0: all)")(
      "top-p", po::value(&s.top_p)->default_value(1.0), "sample among the most likely tokens of this mass")(
      "temperature", po::value(&s.temperature)->default_value(1.0),
      "divide the logits by this before sampling")("seed", po::value(&s.seed)->default_value(0),
                                                   "seed of the draws")(
      "device", po::value(&placement.device)->default_value("cpu"),
      "where the model runs: cpu, cuda or cuda:N")("dtype",
                                                   po::value(&placement.dtype)->default_value("fp32"),
                                                   "the weights' and activations' type: fp32, bf16, fp16")(
      "batch", po::value(&placement.batch)->default_value(1),
      "prompts of one length run together, this many at most (one line of output each, in order)")(
      "stats", "print each batch's figures to stderr as one JSON line (rows, tokens, seconds, tokens/s)")(
      "ignore-eos", "go on past the model's eos_token_id")(
      "json", "print {\"new_tokens\": [...], \"text\": \"...\"}");
  po::variables_map vm;
  if (!parse_options(args, desc, vm, synopsis)) return 0;
  if (vm.count("input-ids") + vm.count("prompt") + vm.count("prompts") != 1)
    throw usage_error("give one of --input-ids, --prompt and --prompts\nusage: " + std::string(synopsis));
  s.greedy = vm.count("greedy") != 0;
  if (s.greedy)
    for (const char* option : {"top-k", "top-p", "temperature", "seed"})
      if (!vm[option].defaulted()) throw usage_error(std::string("--") + option + " samples; it cannot go with --greedy");
  try {
    core::model::check_sampling(s);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--") + e.what());
  }

  const bool tokenizer = has_tokenizer(dir);
  const auto prompts = prompt_ids(vm, dir, tokenizer);
  if (!vm.count("ignore-eos")) s.stop_ids = core::model::read_eos_ids(dir);
  std::function<void(const core::model::generation_stats&)> on_batch;
  if (vm.count("stats")) on_batch = print_stats;
  const bool one_line = vm.count("prompts") != 0 || prompts.size() > 1;
  for (const auto& tokens : core::model::generate_from_dir(dir, prompts, s, placement, on_batch))
    print_result(dir, tokenizer, vm.count("json") != 0, one_line, tokens);
  return std::cout.flush() ? 0 : 1;
}

}  // namespace cohort::tools
