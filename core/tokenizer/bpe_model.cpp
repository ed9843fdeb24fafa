// The Hugging Face "BPE" model: merges by rank, byte_fallback, unk (see bpe_model.hpp).
#include "core/tokenizer/bpe_model.hpp"

#include <nlohmann/json.hpp>

#include <mutex>
#include <queue>

#include "core/tokenizer/json_fields.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {
namespace {

constexpr std::size_t cache_capacity = 256000;  // words; beyond it new words are not cached
constexpr std::size_t cache_max_word = 256;     // bytes; longer words are not cached

std::uint64_t pair_key(token_id a, token_id b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

bpe_model::bpe_model(const nlohmann::json& model, const std::string& where) {
  const std::string here = where + " model";
  const auto& vocab = required_object(model, "vocab", here);
  const auto& merges = required_array(model, "merges", here);

  token_id max = -1;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > INT32_MAX) {
      throw tokenizer_error(here + ".vocab: token \"" + token + "\" has id " + id.dump() +
                            "; ids must be non-negative integers");
    }
    max = std::max(max, id.get<token_id>());
  }
  // Ids index a table, so they must be dense enough; real vocabularies number 0..size-1.
  if (static_cast<std::size_t>(max) >= 2 * vocab.size() + 65536) {
    throw tokenizer_error(here + ".vocab: the largest id is " + std::to_string(max) + " for only " +
                          std::to_string(vocab.size()) + " tokens; ids must be (nearly) contiguous from 0");
  }
  tokens_.resize(static_cast<std::size_t>(max + 1));
  present_.assign(static_cast<std::size_t>(max + 1), false);
  for (const auto& [token, id] : vocab.items()) {
    const auto i = static_cast<std::size_t>(id.get<token_id>());
    if (present_[i]) {
      throw tokenizer_error(here + ".vocab: id " + std::to_string(i) + " is used by both \"" + tokens_[i] +
                            "\" and \"" + token + "\"");
    }
    tokens_[i] = token;
    present_[i] = true;
  }
  vocab_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (present_[i]) vocab_.emplace(tokens_[i], static_cast<token_id>(i));
  }

  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    throw tokenizer_error(here + ": \"dropout\" is " + model["dropout"].dump() +
                          "; only null or 0 is supported (encoding must be deterministic)");
  }
  const auto optional_string = [&](const char* field) -> std::string {
    if (!model.contains(field) || model[field].is_null()) return std::string();
    return required_string(model, field, here);
  };
  continuing_subword_prefix_ = optional_string("continuing_subword_prefix");
  end_of_word_suffix_ = optional_string("end_of_word_suffix");
  unk_token_ = optional_string("unk_token");
  if (!unk_token_.empty()) unk_id_ = token_to_id(unk_token_);  // checked when needed, as in Hugging Face
  fuse_unk_ = optional_bool(model, "fuse_unk", false, here);
  byte_fallback_ = optional_bool(model, "byte_fallback", false, here);
  ignore_merges_ = optional_bool(model, "ignore_merges", false, here);
  byte_ids_ = byte_fallback_ids(*this);

  merges_.reserve(merges.size());
  const std::size_t prefix_len = continuing_subword_prefix_.size();
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    std::string a, b;
    const std::string at = here + ".merges[" + std::to_string(rank) + "]";
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const auto space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        throw tokenizer_error(at + ": \"" + line + "\" must be two tokens separated by one space");
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw tokenizer_error(at + ": " + m.dump() + " must be \"a b\" or [\"a\", \"b\"]");
    }
    const auto a_id = token_to_id(a);
    const auto b_id = token_to_id(b);
    if (!a_id || !b_id) {
      throw tokenizer_error(at + ": token \"" + (a_id ? b : a) + "\" is not in the vocab");
    }
    if (b.size() < prefix_len) {
      throw tokenizer_error(at + ": token \"" + b + "\" lacks the continuing_subword_prefix");
    }
    const std::string merged = a + b.substr(prefix_len);
    const auto new_id = token_to_id(merged);
    if (!new_id) throw tokenizer_error(at + ": the merged token \"" + merged + "\" is not in the vocab");
    merges_[pair_key(*a_id, *b_id)] = merge{static_cast<std::uint32_t>(rank), *new_id};
  }
}

std::optional<token_id> bpe_model::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* bpe_model::id_to_token(token_id id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size() || !present_[static_cast<std::size_t>(id)]) {
    return nullptr;
  }
  return &tokens_[static_cast<std::size_t>(id)];
}

const bpe_model::merge* bpe_model::find_merge(token_id a, token_id b) const {
  const auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void bpe_model::encode_word(const std::string& word, std::vector<token_id>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < cache_max_word;
  // A cheap shard choice (length and end bytes) that spreads words well enough.
  cache_shard& shard = cache_[(word.size() * 31 + static_cast<unsigned char>(word.front()) * 7 +
                               static_cast<unsigned char>(word.back())) %
                              cache_shards];
  if (cacheable) {
    std::shared_lock<std::shared_mutex> lock(shard.mutex);
    const auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<token_id> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock<std::shared_mutex> lock(shard.mutex);
    if (shard.words.size() < cache_capacity / cache_shards) shard.words.emplace(word, std::move(ids));
  }
}

// Word::merge_all of Hugging Face tokenizers: repeatedly merge the pair with the lowest rank
// (leftmost first on ties), through a priority queue with lazy invalidation.
std::vector<token_id> bpe_model::merge_word(std::string_view word) const {
  struct symbol {
    token_id id;
    int prev, next;
    bool alive;
  };
  std::vector<symbol> symbols;
  symbols.reserve(word.size());
  const auto push = [&](token_id id) {
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };

  token_id pending_unk = -1;  // an unk not yet pushed (fuse_unk merges following ones into it)
  std::size_t pos = 0;
  std::string scratch;
  while (pos < word.size()) {
    const std::size_t begin = pos;
    pos += utf8_length(static_cast<unsigned char>(word[pos]));
    if (pos > word.size()) pos = word.size();
    std::string_view ch = word.substr(begin, pos - begin);
    if (begin > 0 && !continuing_subword_prefix_.empty()) {
      scratch = continuing_subword_prefix_ + std::string(ch);
      ch = scratch;
    }
    if (pos == word.size() && !end_of_word_suffix_.empty()) {
      scratch = std::string(ch) + end_of_word_suffix_;
      ch = scratch;
    }
    if (const auto id = token_to_id(ch)) {
      if (pending_unk >= 0) {
        push(pending_unk);
        pending_unk = -1;
      }
      push(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (const char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        // As in Hugging Face, a pending unk is not flushed before the byte tokens.
        for (const char c : ch) push(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (!unk_token_.empty()) {
      if (!unk_id_) {
        throw tokenizer_error("cannot encode \"" + std::string(ch) + "\": it is not in the vocab and the unk_token \"" +
                              unk_token_ + "\" is not either; fix the tokenizer.json");
      }
      if (pending_unk >= 0 && !fuse_unk_) push(pending_unk);
      pending_unk = *unk_id_;
    }
    // Without an unk_token, Hugging Face drops a character the vocab lacks; so do we.
  }
  if (pending_unk >= 0) push(pending_unk);
  if (!symbols.empty()) symbols.back().next = -1;
  const int n = static_cast<int>(symbols.size());

  struct candidate {
    std::uint32_t rank;
    int pos;
    token_id new_id;
  };
  const auto later = [](const candidate& x, const candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::priority_queue<candidate, std::vector<candidate>, decltype(later)> queue(later);
  for (int i = 0; i + 1 < n; ++i) {
    if (const merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) queue.push({m->rank, i, m->new_id});
  }
  while (!queue.empty()) {
    const candidate top = queue.top();
    queue.pop();
    symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    symbol& right = symbols[static_cast<std::size_t>(left.next)];
    const merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) {
      if (const merge* pm = find_merge(symbols[static_cast<std::size_t>(left.prev)].id, left.id)) {
        queue.push({pm->rank, left.prev, pm->new_id});
      }
    }
    if (left.next >= 0) {
      if (const merge* nm = find_merge(left.id, symbols[static_cast<std::size_t>(left.next)].id)) {
        queue.push({nm->rank, top.pos, nm->new_id});
      }
    }
  }
  std::vector<token_id> ids;
  ids.reserve(symbols.size());
  for (const auto& s : symbols) {
    if (s.alive) ids.push_back(s.id);
  }
  return ids;
}

}  // namespace cohort::core::tokenizer
