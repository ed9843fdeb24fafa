// The on-disk token-shard format: manifest.json and the shard files (see format.hpp).
#include "core/data/format.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cohort::core::data {
namespace {

using nlohmann::json;

json file_to_json(const file_info& f) { return json{{"bytes", f.bytes}, {"xxh64", f.xxh64}}; }

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw data_error(where + ": missing field \"" + key + "\"");
  return *it;
}

template <typename T>
T get(const json& j, const char* key, const std::string& where) {
  try {
    return field(j, key, where).get<T>();
  } catch (const json::exception& e) {
    throw data_error(where + ": field \"" + key + "\" has the wrong type (" + e.what() + ")");
  }
}

file_info file_from_json(const json& j, const std::string& where) {
  file_info f;
  f.bytes = get<std::uint64_t>(j, "bytes", where);
  f.xxh64 = get<std::string>(j, "xxh64", where);
  return f;
}

}  // namespace

std::string shard_name(std::size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05zu", index);
  return buf;
}

std::vector<std::pair<std::string, const file_info*>> shard_files(const shard_info& s) {
  std::vector<std::pair<std::string, const file_info*>> out{{s.name + ".tokens", &s.tokens_file},
                                                            {s.name + ".index", &s.index_file}};
  if (s.mask_file) out.emplace_back(s.name + ".mask", &*s.mask_file);
  if (s.target_tokens_file) out.emplace_back(s.name + ".target_tokens", &*s.target_tokens_file);
  if (s.target_index_file) out.emplace_back(s.name + ".target_index", &*s.target_index_file);
  return out;
}

std::string token_dtype_name(int token_bytes) { return token_bytes == 2 ? "uint16" : "uint32"; }

int token_bytes_for_vocab(std::int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

std::string manifest_to_json(const manifest& m) {
  json shards = json::array();
  for (const auto& s : m.shards) {
    json files{{"tokens", file_to_json(s.tokens_file)}, {"index", file_to_json(s.index_file)}};
    if (s.mask_file) files["mask"] = file_to_json(*s.mask_file);
    json shard{{"name", s.name}, {"samples", s.samples}, {"tokens", s.tokens}, {"files", files}};
    if (m.seq2seq) {
      shard["target_tokens"] = s.target_tokens;
      shard["files"]["target_tokens"] = file_to_json(*s.target_tokens_file);
      shard["files"]["target_index"] = file_to_json(*s.target_index_file);
    }
    shards.push_back(std::move(shard));
  }
  json j{{"format", "cohort-token-shards"},
         {"format_version", m.version},
         {"kind", m.kind},
         {"layout", m.layout},
         {"tokenizer", {{"identity", m.tokenizer_identity}, {"path", m.tokenizer_path}}},
         {"vocab_size", m.vocab_size},
         {"token_dtype", token_dtype_name(m.token_bytes)},
         {"seq_len", m.seq_len},
         {"pad_id", m.pad_id},
         {"bos_id", m.bos_id ? json(*m.bos_id) : json(nullptr)},
         {"eos_id", m.eos_id},
         {"has_loss_mask", m.has_loss_mask},
         {"samples", m.samples},
         {"tokens", m.tokens},
         {"loss_tokens", m.loss_tokens},
         {"records", m.records},
         {"truncated_samples", m.truncated_samples},
         {"truncated_tokens", m.truncated_tokens},
         {"special_tokens", m.special_tokens},
         {"source", {{"input", m.source_input}, {"template", m.source_template}, {"field", m.source_field}}},
         {"shards", shards}};
  if (!m.special_token_ids.empty()) j["special_token_ids"] = m.special_token_ids;
  if (m.seq2seq) {
    const auto& t = *m.seq2seq;
    j["seq2seq"] = {{"target_len", t.target_len},
                    {"target_tokens", t.target_tokens},
                    {"target_template", t.target_template},
                    {"over_long", t.over_long},
                    {"truncated_samples", t.truncated_samples},
                    {"truncated_tokens", t.truncated_tokens},
                    {"skipped_samples", t.skipped_samples}};
  }
  return j.dump(2) + "\n";
}

int format_version_of(const std::string& kind) {
  if (kind == "seq2seq") return seq2seq_format_version;
  if (kind == "pairs") return pairs_format_version;
  return 1;
}

manifest manifest_from_json(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw data_error(where + ": not valid JSON (" + e.what() + "); rebuild the dataset");
  }
  if (!j.is_object()) throw data_error(where + ": expected a JSON object");
  manifest m;
  if (get<std::string>(j, "format", where) != "cohort-token-shards")
    throw data_error(where + ": \"format\" is not \"cohort-token-shards\"");
  m.version = get<int>(j, "format_version", where);
  if (m.version < 1 || m.version > format_version)
    throw data_error(
        where + ": format_version " + std::to_string(m.version) +
        " is not supported (this build reads 1 to " + std::to_string(format_version) +
        ": 1 pretrain and sft data sets, 2 seq2seq, 3 pairs); use a newer cohort or rebuild the data set");
  m.kind = get<std::string>(j, "kind", where);
  if (m.version != format_version_of(m.kind))
    throw data_error(where + ": kind \"" + m.kind + "\" with format_version " + std::to_string(m.version) +
                     " (seq2seq data sets are format_version " + std::to_string(seq2seq_format_version) +
                     ", pairs " + std::to_string(pairs_format_version) +
                     ", the others 1); rebuild the data set");
  if (m.kind == "seq2seq") {
    const auto& t = field(j, "seq2seq", where);
    const std::string tw = where + " seq2seq";
    seq2seq_info info;
    info.target_len = get<std::int64_t>(t, "target_len", tw);
    if (info.target_len <= 0) throw data_error(tw + ": target_len must be positive");
    info.target_tokens = get<std::int64_t>(t, "target_tokens", tw);
    info.target_template = get<std::string>(t, "target_template", tw);
    info.over_long = get<std::string>(t, "over_long", tw);
    info.truncated_samples = get<std::int64_t>(t, "truncated_samples", tw);
    info.truncated_tokens = get<std::int64_t>(t, "truncated_tokens", tw);
    info.skipped_samples = get<std::int64_t>(t, "skipped_samples", tw);
    m.seq2seq = info;
  }
  m.layout = get<std::string>(j, "layout", where);
  const auto& tok = field(j, "tokenizer", where);
  m.tokenizer_identity = get<std::string>(tok, "identity", where + " tokenizer");
  m.tokenizer_path = get<std::string>(tok, "path", where + " tokenizer");
  m.vocab_size = get<std::int64_t>(j, "vocab_size", where);
  const auto dtype = get<std::string>(j, "token_dtype", where);
  if (dtype == "uint16") {
    m.token_bytes = 2;
  } else if (dtype == "uint32") {
    m.token_bytes = 4;
  } else {
    throw data_error(where + ": token_dtype \"" + dtype + "\" is not one of uint16, uint32");
  }
  m.seq_len = get<std::int64_t>(j, "seq_len", where);
  if (m.seq_len <= 0) throw data_error(where + ": seq_len must be positive");
  m.pad_id = get<std::int64_t>(j, "pad_id", where);
  if (!field(j, "bos_id", where).is_null()) m.bos_id = get<std::int64_t>(j, "bos_id", where);
  m.eos_id = get<std::int64_t>(j, "eos_id", where);
  m.has_loss_mask = get<bool>(j, "has_loss_mask", where);
  m.samples = get<std::int64_t>(j, "samples", where);
  if (m.kind == "pairs" && m.samples % 2 != 0) {
    throw data_error(where + ": a pairs data set of " + std::to_string(m.samples) +
                     " samples (chosen and rejected alternate, so the count is even); rebuild the data set");
  }
  m.tokens = get<std::int64_t>(j, "tokens", where);
  m.loss_tokens = get<std::int64_t>(j, "loss_tokens", where);
  m.records = get<std::int64_t>(j, "records", where);
  m.truncated_samples = get<std::int64_t>(j, "truncated_samples", where);
  m.truncated_tokens = get<std::int64_t>(j, "truncated_tokens", where);
  m.special_tokens = get<std::vector<std::string>>(j, "special_tokens", where);
  if (j.contains("special_token_ids")) {
    m.special_token_ids = get<std::vector<std::int64_t>>(j, "special_token_ids", where);
    if (m.special_token_ids.size() != m.special_tokens.size())
      throw data_error(where + ": special_token_ids has " + std::to_string(m.special_token_ids.size()) +
                       " ids for " + std::to_string(m.special_tokens.size()) + " special_tokens; rebuild the dataset");
    for (const auto id : m.special_token_ids)
      if (id < 0 || id >= m.vocab_size)
        throw data_error(where + ": special_token_ids holds " + std::to_string(id) + ", outside the vocabulary [0, " +
                         std::to_string(m.vocab_size) + "); rebuild the dataset");
  }
  const auto& src = field(j, "source", where);
  m.source_input = get<std::string>(src, "input", where + " source");
  m.source_template = get<std::string>(src, "template", where + " source");
  m.source_field = get<std::string>(src, "field", where + " source");
  const auto& shards = field(j, "shards", where);
  if (!shards.is_array()) throw data_error(where + ": \"shards\" must be an array");
  std::int64_t samples = 0, tokens = 0, target_tokens = 0;
  for (const auto& sj : shards) {
    shard_info s;
    s.name = get<std::string>(sj, "name", where + " shard");
    const std::string sw = where + " shard " + s.name;
    s.samples = get<std::int64_t>(sj, "samples", sw);
    s.tokens = get<std::int64_t>(sj, "tokens", sw);
    const auto& files = field(sj, "files", sw);
    s.tokens_file = file_from_json(field(files, "tokens", sw), sw + " tokens");
    s.index_file = file_from_json(field(files, "index", sw), sw + " index");
    if (files.contains("mask")) s.mask_file = file_from_json(files["mask"], sw + " mask");
    if (m.has_loss_mask && !s.mask_file) throw data_error(sw + ": has_loss_mask is true but the shard lists no mask file");
    if (m.seq2seq) {
      s.target_tokens = get<std::int64_t>(sj, "target_tokens", sw);
      s.target_tokens_file = file_from_json(field(files, "target_tokens", sw), sw + " target_tokens");
      s.target_index_file = file_from_json(field(files, "target_index", sw), sw + " target_index");
      target_tokens += s.target_tokens;
    }
    samples += s.samples;
    tokens += s.tokens;
    m.shards.push_back(std::move(s));
  }
  if (samples != m.samples || tokens != m.tokens)
    throw data_error(where + ": shard counts (" + std::to_string(samples) + " samples, " + std::to_string(tokens) +
                     " tokens) disagree with the totals; rebuild the dataset");
  if (m.seq2seq && target_tokens != m.seq2seq->target_tokens)
    throw data_error(where + ": shard target token counts (" + std::to_string(target_tokens) +
                     ") disagree with seq2seq.target_tokens; rebuild the dataset");
  return m;
}

manifest read_manifest(const std::string& dir) {
  const auto path = (std::filesystem::path(dir) / manifest_name).string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw data_error(path + ": cannot open (not a cohort dataset directory, or an unfinished build; run "
                            "`cohort-data build` to create it)");
  std::ostringstream text;
  text << in.rdbuf();
  return manifest_from_json(text.str(), path);
}

void write_manifest(const std::string& dir, const manifest& m) {
  const auto path = std::filesystem::path(dir) / manifest_name;
  const auto tmp = std::filesystem::path(dir) / (std::string(manifest_name) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << manifest_to_json(m);
    out.flush();
    if (!out) throw data_error(tmp.string() + ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw data_error(path.string() + ": cannot rename from " + tmp.string() + ": " + ec.message());
}

}  // namespace cohort::core::data
