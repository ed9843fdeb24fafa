// add_tokens_to_tokenizer_files: the export's tokenizer files edited as JSON for added tokens.
#include "core/ckpt/tokenizer_added_tokens.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"

namespace cohort::core::ckpt {
namespace {

namespace fs = std::filesystem;
using ordered = nlohmann::ordered_json;

ordered read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ckpt_error(ckpt_errc::io, path.string() + ": cannot read the tokenizer file");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return ordered::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw ckpt_error(ckpt_errc::io, path.string() + ": not JSON (" + e.what() + "); cannot add the data set's tokens");
  }
}

// `path` as a JSON object (`what` names the file's kind in the error).
ordered read_object(const fs::path& path, const char* what) {
  ordered j = read_json(path);
  if (!j.is_object()) throw ckpt_error(ckpt_errc::io, path.string() + ": not " + what + " object");
  return j;
}

void write_json(const fs::path& path, const ordered& j) { write_file_durable(path.string(), j.dump(2) + "\n"); }

[[noreturn]] void conflict(const fs::path& file, const added_token_id& t, const std::string& what) {
  throw ckpt_error(ckpt_errc::bad_input, file.string() + ": " + what + "; the data set gives \"" + t.content +
                                             "\" the id " + std::to_string(t.id) +
                                             " (built with another tokenizer than the model's?)");
}

// {"content", "lstrip", "normalized", "rstrip", "single_word", "special"} as transformers writes
// an AddedToken (tokenizer.json's entries also carry the id first).
ordered token_entry(const added_token_id& t, bool with_id) {
  ordered e = ordered::object();
  if (with_id) e["id"] = t.id;
  e["content"] = t.content;
  e["single_word"] = false;
  e["lstrip"] = false;
  e["rstrip"] = false;
  e["normalized"] = false;
  e["special"] = true;
  return e;
}

void edit_tokenizer_json(const fs::path& file, const std::vector<added_token_id>& tokens) {
  ordered j = read_object(file, "a tokenizer.json");
  ordered& added = j["added_tokens"];
  if (added.is_null()) added = ordered::array();
  if (!added.is_array()) throw ckpt_error(ckpt_errc::io, file.string() + ": \"added_tokens\" is not a list");
  for (const auto& t : tokens) {
    bool present = false;
    for (const auto& e : added) {
      const bool same_content = e.value("content", std::string()) == t.content;
      const bool same_id = e.value("id", std::int64_t{-1}) == t.id;
      if (same_content != same_id)
        conflict(file, t, same_content ? "lists \"" + t.content + "\" with the id " +
                                             std::to_string(e.value("id", std::int64_t{-1}))
                                       : "gives the id " + std::to_string(t.id) + " to \"" +
                                             e.value("content", std::string()) + "\"");
      present = present || same_content;
    }
    if (present) continue;
    added.push_back(token_entry(t, true));
  }
  std::vector<ordered> by_id(added.begin(), added.end());
  std::stable_sort(by_id.begin(), by_id.end(), [](const ordered& a, const ordered& b) {
    return a.value("id", std::int64_t{0}) < b.value("id", std::int64_t{0});
  });
  added = ordered(by_id);
  write_json(file, j);
}

// Appends the tokens' contents to the list `list` (strings, or AddedToken objects when the list
// holds objects) where they are not yet.
void append_names(ordered& list, const std::vector<added_token_id>& tokens) {
  const bool objects = !list.empty() && list.front().is_object();
  for (const auto& t : tokens) {
    const bool present = std::any_of(list.begin(), list.end(), [&](const ordered& e) {
      return e.is_string() ? e.get<std::string>() == t.content : e.value("content", std::string()) == t.content;
    });
    if (present) continue;
    if (!objects) {
      list.push_back(t.content);
      continue;
    }
    ordered e = token_entry(t, false);
    e.erase("special");  // special_tokens_map.json's entries carry no "special"
    list.push_back(std::move(e));
  }
}

void edit_tokenizer_config(const fs::path& file, const std::vector<added_token_id>& tokens) {
  ordered j = read_object(file, "a tokenizer_config.json");
  ordered& decoder = j["added_tokens_decoder"];
  if (decoder.is_null()) decoder = ordered::object();
  if (!decoder.is_object()) throw ckpt_error(ckpt_errc::io, file.string() + ": \"added_tokens_decoder\" is not an object");
  for (const auto& t : tokens) {
    const std::string key = std::to_string(t.id);
    if (decoder.contains(key)) {
      if (decoder[key].value("content", std::string()) != t.content)
        conflict(file, t, "gives the id " + key + " to \"" + decoder[key].value("content", std::string()) + "\"");
      continue;
    }
    decoder[key] = token_entry(t, false);
  }
  // transformers 5 lists them as extra_special_tokens, 4.x as additional_special_tokens (which 5
  // still reads): extend the list the file has, else write the one both read.
  const char* list = j.contains("extra_special_tokens") && j["extra_special_tokens"].is_array()
                         ? "extra_special_tokens"
                         : "additional_special_tokens";
  if (!j.contains(list) || !j[list].is_array()) j[list] = ordered::array();
  append_names(j[list], tokens);
  write_json(file, j);
}

void edit_special_tokens_map(const fs::path& file, const std::vector<added_token_id>& tokens) {
  ordered j = read_object(file, "a special_tokens_map.json");
  if (!j.contains("additional_special_tokens") || !j["additional_special_tokens"].is_array())
    j["additional_special_tokens"] = ordered::array();
  append_names(j["additional_special_tokens"], tokens);
  write_json(file, j);
}

void edit_added_tokens_json(const fs::path& file, const std::vector<added_token_id>& tokens) {
  ordered j = fs::exists(file) ? read_object(file, "an added_tokens.json") : ordered::object();
  for (const auto& t : tokens) {
    if (j.contains(t.content)) {
      if (j[t.content] != t.id) conflict(file, t, "lists \"" + t.content + "\" with the id " + j[t.content].dump());
      continue;
    }
    j[t.content] = t.id;
  }
  write_json(file, j);
}

}  // namespace

std::vector<added_token_id> added_tokens_of(const nlohmann::json& extra, const std::string& where) {
  std::vector<added_token_id> out;
  if (!extra.is_object() || !extra.contains("added_tokens")) return out;
  const auto& list = extra.at("added_tokens");
  const auto bad = [&] {
    throw ckpt_error(ckpt_errc::bad_manifest,
                     where + ": extra.added_tokens must be a list of {\"id\": N, \"content\": TEXT}, got " + list.dump());
  };
  if (!list.is_array()) bad();
  for (const auto& e : list) {
    if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() || !e.contains("content") ||
        !e["content"].is_string() || e["id"].get<std::int64_t>() < 0)
      bad();
    out.push_back({e["id"].get<std::int64_t>(), e["content"].get<std::string>()});
  }
  return out;
}

std::vector<std::string> add_tokens_to_tokenizer_files(const std::string& dir,
                                                       const std::vector<added_token_id>& tokens) {
  std::vector<std::string> changed;
  if (tokens.empty()) return changed;
  const fs::path d(dir);
  std::error_code ec;
  const auto has = [&](const char* name) { return fs::is_regular_file(d / name, ec); };
  const bool fast = has("tokenizer.json");
  const bool slow_only = !fast && (has("tokenizer.model") || has("spiece.model"));
  const bool added_json = has("added_tokens.json") || slow_only;  // checked before it is written
  if (fast) {
    edit_tokenizer_json(d / "tokenizer.json", tokens);
    changed.push_back("tokenizer.json");
  }
  if (has("tokenizer_config.json")) {
    edit_tokenizer_config(d / "tokenizer_config.json", tokens);
    changed.push_back("tokenizer_config.json");
  }
  if (has("special_tokens_map.json")) {
    edit_special_tokens_map(d / "special_tokens_map.json", tokens);
    changed.push_back("special_tokens_map.json");
  }
  if (added_json) {
    edit_added_tokens_json(d / "added_tokens.json", tokens);
    changed.push_back("added_tokens.json");
  }
  return changed;
}

}  // namespace cohort::core::ckpt
