// A read-only byte trie for prefix searches (see byte_trie.hpp).
#include "core/tokenizer/byte_trie.hpp"

#include <algorithm>

namespace cohort::core::tokenizer {
namespace {

using entry = std::pair<std::string, std::int32_t>;
using range = std::pair<std::size_t, std::size_t>;

// Splits sorted[lo, hi) (keys longer than `depth`, sharing their first `depth` bytes) into runs
// with the same byte at `depth`.
std::vector<range> groups_at(const std::vector<entry>& sorted, std::size_t lo, std::size_t hi, std::size_t depth) {
  std::vector<range> out;
  while (lo < hi) {
    const char c = sorted[lo].first[depth];
    std::size_t end = lo + 1;
    while (end < hi && sorted[end].first[depth] == c) ++end;
    out.emplace_back(lo, end);
    lo = end;
  }
  return out;
}

}  // namespace

byte_trie::byte_trie(const std::vector<std::pair<std::string, std::int32_t>>& entries) {
  root_.fill(-1);
  std::vector<entry> sorted(entries);
  std::sort(sorted.begin(), sorted.end());
  // Each node covers the sorted keys that pass through it; its children are appended together so
  // that they are contiguous, then filled depth first.
  struct pending {
    std::size_t node, lo, hi, depth;  // depth: bytes matched when at `node`
  };
  std::vector<pending> stack;
  for (const auto& [lo, hi] : groups_at(sorted, 0, sorted.size(), 0)) {
    const auto index = nodes_.size();
    root_[static_cast<unsigned char>(sorted[lo].first[0])] = static_cast<std::int32_t>(index);
    nodes_.emplace_back();
    labels_.push_back(static_cast<unsigned char>(sorted[lo].first[0]));
    stack.push_back({index, lo, hi, 1});
  }
  while (!stack.empty()) {
    auto [index, lo, hi, depth] = stack.back();
    stack.pop_back();
    if (sorted[lo].first.size() == depth) {  // sorted first: the key that ends here
      nodes_[index].value = sorted[lo].second;
      ++lo;
    }
    const auto groups = groups_at(sorted, lo, hi, depth);
    nodes_[index].first_child = static_cast<std::uint32_t>(nodes_.size());
    nodes_[index].child_count = static_cast<std::uint32_t>(groups.size());
    for (const auto& [glo, ghi] : groups) {
      stack.push_back({nodes_.size(), glo, ghi, depth + 1});
      nodes_.emplace_back();
      labels_.push_back(static_cast<unsigned char>(sorted[glo].first[depth]));
    }
  }
}

std::int32_t byte_trie::child(const node& n, unsigned char label) const {
  const auto begin = labels_.begin() + n.first_child;
  const auto end = begin + n.child_count;
  const auto it = std::lower_bound(begin, end, label);
  if (it == end || *it != label) return -1;
  return static_cast<std::int32_t>(it - labels_.begin());
}

std::int32_t byte_trie::shortest_prefix(std::string_view text) const {
  std::int32_t found = -1;
  for_each_prefix(text, 0, [&](std::size_t, std::int32_t value) {
    if (found < 0) found = value;
  });
  return found;
}

}  // namespace cohort::core::tokenizer
