// Hugging Face tokenizer.json decoders: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace
// and Sequence, each a step over the list of token strings (decode_chain); null joins with " ".
// Immutable; safe to share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cohort::core::tokenizer {

class decoder {
 public:
  virtual ~decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// `spec` is the "decoder" value of tokenizer.json; null gives nullptr.
std::unique_ptr<decoder> make_decoder(const nlohmann::json& spec, const std::string& where);

// Runs `d` (or the null decoder) and concatenates the result into the decoded text.
std::string run_decoder(const decoder* d, std::vector<std::string> tokens);

}  // namespace cohort::core::tokenizer
