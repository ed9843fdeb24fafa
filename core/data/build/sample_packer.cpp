// Turns tokenized records into samples for the shard writer (see sample_packer.hpp).
#include "core/data/build/sample_packer.hpp"

#include <algorithm>

namespace cohort::core::data {

sample_packer::sample_packer(shard_writer& writer, const packer_config& config) : writer_(writer), config_(config) {
  if (config_.kind != sample_kind::seq2seq && config_.seq_len < 2)
    throw data_error("--seq-len must be >= 2, got " + std::to_string(config_.seq_len));
}

void sample_packer::emit(const std::int32_t* ids, const std::uint8_t* mask, std::size_t n) {
  writer_.append(ids, static_cast<std::int64_t>(n), config_.kind == sample_kind::sft ? mask : nullptr);
}

void sample_packer::add(const encoded_record& record) {
  if (config_.kind == sample_kind::pretrain) {
    add_pretrain(record);
  } else if (config_.kind == sample_kind::sft) {
    add_sft(record);
  } else if (config_.kind == sample_kind::pairs) {
    add_pairs(record);
  } else {
    add_seq2seq(record);
  }
}

void sample_packer::add_seq2seq(const encoded_record& r) {
  ++records_;
  if (r.skip) {
    ++skipped_samples_;
    return;
  }
  if (r.source_cut > 0) {
    ++truncated_samples_;
    truncated_tokens_ += r.source_cut;
  }
  if (r.target_cut > 0) {
    ++truncated_target_samples_;
    truncated_target_tokens_ += r.target_cut;
  }
  writer_.append_pair(r.ids.data(), static_cast<std::int64_t>(r.ids.size()), r.target_ids.data(),
                      static_cast<std::int64_t>(r.target_ids.size()));
}

void sample_packer::add_pairs(const encoded_record& r) {
  ++records_;
  add_delimited(r.ids);
  add_delimited(r.target_ids);
}

void sample_packer::add_delimited(const std::vector<std::int32_t>& text) {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() + 2);
  if (config_.bos_id) ids.push_back(*config_.bos_id);
  ids.insert(ids.end(), text.begin(), text.end());
  ids.push_back(config_.eos_id);
  const auto seq = static_cast<std::size_t>(config_.seq_len);
  if (ids.size() > seq) {
    ++truncated_samples_;
    truncated_tokens_ += static_cast<std::int64_t>(ids.size() - seq);
    ids.resize(seq);
  }
  emit(ids.data(), nullptr, ids.size());
}

void sample_packer::add_pretrain(const encoded_record& r) {
  if (r.ids.empty() && !in_doc_) return;  // an empty document
  const auto seq = static_cast<std::size_t>(config_.seq_len);
  const auto push = [&](std::int32_t id) {
    if (config_.layout == sample_layout::pad && ids_.size() >= seq) {
      ++doc_dropped_;
    } else {
      ids_.push_back(id);
    }
  };
  if (!in_doc_) {
    in_doc_ = true;
    if (config_.bos_id) push(*config_.bos_id);
  }
  for (auto id : r.ids) push(id);
  if (r.doc_end) {
    push(config_.eos_id);
    in_doc_ = false;
    ++records_;
    if (config_.layout == sample_layout::pad) {
      if (doc_dropped_ > 0) {
        ++truncated_samples_;
        truncated_tokens_ += doc_dropped_;
      }
      emit(ids_.data(), nullptr, ids_.size());
      ids_.clear();
      doc_dropped_ = 0;
    }
  }
  if (config_.layout == sample_layout::pack) {
    while (ids_.size() - start_ >= seq) {
      emit(ids_.data() + start_, nullptr, seq);
      start_ += seq;
    }
    if (start_ > 0 && start_ * 2 >= ids_.size()) {  // compact, amortised O(1) per token
      ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(start_));
      start_ = 0;
    }
  }
}

void sample_packer::add_sft(const encoded_record& r) {
  ++records_;
  const auto seq = static_cast<std::size_t>(config_.seq_len);
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
  ids.reserve(r.ids.size() + 2);
  if (config_.bos_id) {
    ids.push_back(*config_.bos_id);
    mask.push_back(0);
  }
  for (std::size_t i = 0; i < r.ids.size(); ++i) {
    ids.push_back(r.ids[i]);
    mask.push_back(i < r.prompt_tokens ? 0 : 1);
  }
  ids.push_back(config_.eos_id);
  mask.push_back(1);
  if (ids.size() > seq) {
    ++truncated_samples_;
    truncated_tokens_ += static_cast<std::int64_t>(ids.size() - seq);
    ids.resize(seq);
    mask.resize(seq);
  }
  if (config_.layout == sample_layout::pad) {
    emit(ids.data(), mask.data(), ids.size());
    return;
  }
  if (ids_.size() + ids.size() > seq) flush_pending();
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  mask_.insert(mask_.end(), mask.begin(), mask.end());
}

void sample_packer::flush_pending() {
  if (ids_.size() > start_) emit(ids_.data() + start_, mask_.empty() ? nullptr : mask_.data() + start_, ids_.size() - start_);
  ids_.clear();
  mask_.clear();
  start_ = 0;
}

void sample_packer::finish() {
  if (config_.kind == sample_kind::pretrain && in_doc_) {
    // The input ended inside a document (cannot happen with the reader, which ends every file);
    // close it so no tokens are lost.
    encoded_record end;
    end.doc_end = true;
    add_pretrain(end);
  }
  flush_pending();
}

}  // namespace cohort::core::data
