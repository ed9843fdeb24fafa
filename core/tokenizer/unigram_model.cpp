// The Hugging Face "Unigram" model: Viterbi segmentation over piece scores (see unigram_model.hpp).
#include "core/tokenizer/unigram_model.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "core/tokenizer/json_fields.hpp"
#include "core/tokenizer/unicode.hpp"

namespace cohort::core::tokenizer {
namespace {

// What sentencepiece and Hugging Face subtract from the lowest piece score to score an unknown
// character, so that any segmentation into pieces beats one through unk.
constexpr double unknown_penalty = 10.0;

}  // namespace

unigram_model::unigram_model(const nlohmann::json& spec, const std::string& where) : where_(where) {
  const std::string here = where + " model";
  const auto& vocab = required_array(spec, "vocab", here);
  if (vocab.empty()) throw tokenizer_error(here + ": \"vocab\" is empty; a Unigram model needs at least one piece");
  if (vocab.size() > static_cast<std::size_t>(std::numeric_limits<token_id>::max())) {
    throw tokenizer_error(here + ": \"vocab\" has " + std::to_string(vocab.size()) + " pieces, more than token ids hold");
  }
  pieces_.reserve(vocab.size());
  scores_.reserve(vocab.size());
  double min_score = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    const auto& e = vocab[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
      throw tokenizer_error(here + ".vocab[" + std::to_string(i) + "]: " + e.dump().substr(0, 80) +
                            " must be [piece, score] with a string piece and a numeric score");
    }
    pieces_.push_back(e[0].get<std::string>());
    scores_.push_back(e[1].get<double>());
    if (pieces_.back().empty()) throw tokenizer_error(here + ".vocab[" + std::to_string(i) + "]: the piece is empty");
    min_score = std::min(min_score, scores_.back());
  }
  unk_score_ = min_score - unknown_penalty;
  std::vector<std::pair<std::string, std::int32_t>> entries;
  entries.reserve(pieces_.size());
  ids_.reserve(pieces_.size());
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const auto [it, fresh] = ids_.emplace(pieces_[i], static_cast<token_id>(i));
    if (!fresh) {
      throw tokenizer_error(here + ".vocab[" + std::to_string(i) + "]: the piece \"" + pieces_[i] +
                            "\" is already vocab[" + std::to_string(it->second) + "]; pieces must be distinct");
    }
    entries.emplace_back(pieces_[i], static_cast<std::int32_t>(i));
  }
  trie_ = byte_trie(entries);

  if (spec.contains("unk_id") && !spec["unk_id"].is_null()) {
    const auto& u = spec["unk_id"];
    if (!u.is_number_integer() || u.get<std::int64_t>() < 0 ||
        u.get<std::int64_t>() >= static_cast<std::int64_t>(pieces_.size())) {
      throw tokenizer_error(here + ": \"unk_id\" is " + u.dump() + "; it must be null or an index into \"vocab\" (0.." +
                            std::to_string(pieces_.size() - 1) + ")");
    }
    unk_id_ = u.get<token_id>();
  }
  byte_fallback_ = optional_bool(spec, "byte_fallback", false, here);
  byte_ids_ = byte_fallback_ids(*this);
}

std::optional<token_id> unigram_model::token_to_id(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* unigram_model::id_to_token(token_id id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size()) return nullptr;
  return &pieces_[static_cast<std::size_t>(id)];
}

// Unigram::encode_optimized of Hugging Face tokenizers (sentencepiece's optimized lattice): for
// every character boundary the best-scoring segmentation that ends there, extended by each piece
// that starts there, or by unk for one character when no piece of exactly that character exists.
// Ties keep the earlier (shorter) candidate.
void unigram_model::encode_word(const std::string& word, std::vector<token_id>& out) const {
  if (word.empty()) return;
  struct best_path {
    double score = 0;
    std::size_t start = 0;
    token_id id = -1;  // -1: no path reaches this boundary yet
  };
  const std::size_t n = word.size();
  std::vector<best_path> best(n + 1);
  best[0].id = 0;  // reached, with score 0
  for (std::size_t start = 0; start < n;) {
    const std::size_t char_length = std::min(utf8_length(static_cast<unsigned char>(word[start])), n - start);
    const double here = best[start].score;
    bool has_single_character = false;
    const auto offer = [&](std::size_t end, token_id id, double score) {
      best_path& target = best[end];
      if (target.id < 0 || here + score > target.score) target = {here + score, start, id};
    };
    trie_.for_each_prefix(word, start, [&](std::size_t length, std::int32_t id) {
      offer(start + length, id, scores_[static_cast<std::size_t>(id)]);
      has_single_character = has_single_character || length == char_length;
    });
    if (!has_single_character) {
      if (!unk_id_) {
        throw tokenizer_error(where_ + ": cannot encode \"" + word.substr(start, char_length) +
                              "\": no piece covers it and the Unigram model has no \"unk_id\"");
      }
      offer(start + char_length, *unk_id_, unk_score_);
    }
    start += char_length;
  }
  // Back from the end; runs of unk are fused into one before they are emitted.
  std::vector<std::pair<std::size_t, token_id>> path;  // (start, id), last first
  for (std::size_t end = n; end > 0; end = best[end].start) path.emplace_back(best[end].start, best[end].id);
  std::size_t end = n;
  std::size_t unknown_end = 0;  // end of the unk run being collected; 0: none
  const std::size_t first_out = out.size();
  for (const auto& [start, id] : path) {
    const bool unknown = unk_id_ && id == *unk_id_;
    if (!unknown && unknown_end > 0) {
      emit_unknown(std::string_view(word).substr(end, unknown_end - end), out);
      unknown_end = 0;
    }
    if (unknown) {
      if (unknown_end == 0) unknown_end = end;
    } else {
      out.push_back(id);
    }
    end = start;
  }
  if (unknown_end > 0) emit_unknown(std::string_view(word).substr(0, unknown_end), out);
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first_out), out.end());
}

void unigram_model::emit_unknown(std::string_view run, std::vector<token_id>& out) const {
  if (const auto id = token_to_id(run)) {
    out.push_back(*id);
    return;
  }
  if (byte_fallback_ && std::all_of(run.begin(), run.end(), [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
    // Emitted in reverse: the caller reverses everything appended.
    for (auto it = run.rbegin(); it != run.rend(); ++it) out.push_back(byte_ids_[static_cast<unsigned char>(*it)]);
    return;
  }
  out.push_back(*unk_id_);
}

}  // namespace cohort::core::tokenizer
