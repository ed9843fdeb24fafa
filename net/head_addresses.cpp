// Finding the leading head among several (see head_addresses.hpp).
#include "net/head_addresses.hpp"

#include <algorithm>
#include <cctype>

#include "net/net_error.hpp"

namespace cohort::net {

namespace {

std::string trimmed(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool host_port(const std::string& a) {
  const std::string bare = a.rfind("tcp://", 0) == 0 ? a.substr(6) : a;
  const auto colon = bare.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == bare.size()) return false;
  const auto port = bare.substr(colon + 1);
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c); }))
    return false;
  const long n = std::stol(port);
  return n > 0 && n <= 65535;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<std::string> parse_head_addresses(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto comma = list.find(',', start);
    const auto entry = trimmed(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (entry.empty())
      throw net_error("head address list \"" + list + "\" has an empty entry: give HOST:PORT[,HOST:PORT...]");
    if (!host_port(entry))
      throw net_error("head address \"" + entry + "\" in \"" + list +
                      "\" is not HOST:PORT (a port 1-65535): give HOST:PORT[,HOST:PORT...]");
    if (!contains(out, entry)) out.push_back(entry);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

leader_search::leader_search(std::vector<std::string> configured, leader_record_reader store_leader,
                             int max_redirects)
    : configured_(std::move(configured)), store_leader_(std::move(store_leader)),
      max_redirects_(max_redirects) {
  if (configured_.empty() && !store_leader_)
    throw net_error("no head address to try: give --address HOST:PORT[,HOST:PORT...] (or "
                    "$COHORT_ADDRESS), or a store that holds the leader record");
}

std::optional<std::string> leader_search::store_leader() const {
  if (!store_leader_) return std::nullopt;
  return store_leader_();
}

void leader_search::note(const std::string& address, const std::string& what) {
  answers_.emplace_back(address, what);
}

std::string leader_search::first() {
  tried_.clear();
  answers_.clear();
  redirects_ = 0;
  if (auto leader = store_leader();
      leader && !leader->empty() && (configured_.empty() || contains(configured_, *leader))) {
    tried_.push_back(*leader);
    return *leader;
  }
  if (auto next = next_untried()) return *next;
  // Only a store and no live lease in it: nothing to try yet but say so when it fails.
  note("the store's leader record", "names no live leader");
  return "";
}

std::optional<std::string> leader_search::next_untried() {
  for (const auto& a : configured_)
    if (!contains(tried_, a)) {
      tried_.push_back(a);
      return a;
    }
  if (auto leader = store_leader(); leader && !leader->empty() && !contains(tried_, *leader)) {
    tried_.push_back(*leader);
    return *leader;
  }
  return std::nullopt;
}

std::optional<std::string> leader_search::redirected(const std::string& from, const std::string& leader,
                                                     const std::string& message) {
  note(from, message);
  if (!leader.empty() && leader != from) {
    if (redirects_ >= max_redirects_) {
      note(leader, "not tried: " + std::to_string(max_redirects_) + " redirects followed already");
      return std::nullopt;
    }
    ++redirects_;
    if (!contains(tried_, leader)) tried_.push_back(leader);
    return leader;
  }
  return next_untried();
}

std::optional<std::string> leader_search::unreachable(const std::string& from, const std::string& why) {
  note(from, why);
  return next_untried();
}

std::string leader_search::rotate(const std::string& from) {
  if (auto leader = store_leader(); leader && !leader->empty() && *leader != from) return *leader;
  if (configured_.empty()) return from;
  // The configured address after `from` (or the first, when `from` is not one of them).
  auto it = std::find(configured_.begin(), configured_.end(), from);
  rotation_ = it == configured_.end() ? 0 : static_cast<std::size_t>(it - configured_.begin()) + 1;
  return configured_[rotation_ % configured_.size()];
}

void leader_search::found(const std::string& at) {
  tried_.assign({at});
  answers_.clear();
  redirects_ = 0;
}

std::string leader_search::failure() const {
  std::string out = "no head leads among ";
  for (std::size_t i = 0; i < configured_.size(); ++i) out += (i ? ", " : "") + configured_[i];
  if (store_leader_) out += configured_.empty() ? "the store's leader record" : " and the store's leader record";
  for (const auto& [address, what] : answers_) out += "; " + address + ": " + what;
  return out + " (is a cluster-head leading? `cluster-head --store DIR` prints \"serving on\" "
               "once it leads)";
}

}  // namespace cohort::net
