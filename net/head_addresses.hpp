// Finding the leading head among several: the address list of --address / $COHORT_ADDRESS
// ("h1:7411,h2:7411") and the leader record of a store the caller shares with the heads, tried in
// order, with "not the leader; the leader is X" redirects followed a bounded number of times.
// Plain logic, no sockets: `submit` (one search per command) and cluster-worker's gateway (a search
// that never gives up) drive it. Not thread-safe; one object per search.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cohort::net {

// "h1:7411, h2:7411" -> {"h1:7411", "h2:7411"}: split at commas, blanks trimmed, duplicates
// dropped (first kept). Throws net_error naming the list when it or an entry is empty or an entry
// is not HOST:PORT.
std::vector<std::string> parse_head_addresses(const std::string& list);

// The leader's address as the store's leader record names it, when its lease is live; nullopt when
// there is no store, no record, or the lease has expired.
using leader_record_reader = std::function<std::optional<std::string>()>;

class leader_search {
 public:
  static constexpr int default_max_redirects = 4;

  // `configured`: the addresses to try, in order (at least one unless `store_leader` is set).
  leader_search(std::vector<std::string> configured, leader_record_reader store_leader = {},
                int max_redirects = default_max_redirects);

  // The address to try first: the store's live leader when it is one of the configured ones (or
  // none are configured), else the first configured one. "" when there is nothing to try.
  std::string first();
  // The head at `from` answered that it does not lead and named `leader` ("" when it knows of no
  // live leader). Returns the address to try next; nullopt when the redirects are exhausted or
  // every candidate was tried (then failure() says why).
  std::optional<std::string> redirected(const std::string& from, const std::string& leader,
                                        const std::string& message);
  // `from` could not be reached or failed (`why`). The next candidate not yet tried in this
  // round: the configured ones in order, then the store's leader; nullopt when none is left.
  std::optional<std::string> unreachable(const std::string& from, const std::string& why);
  // For a search that never ends (a node): the next address after `from` fell silent, cycling
  // through the candidates forever; the store's live leader first when it names another head.
  std::string rotate(const std::string& from);
  // `at` answered as the leader: the search starts afresh from there (redirect budget reset).
  void found(const std::string& at);

  // What every tried address answered, for an error: "no head leads among h1:7411, h2:7411:
  // h1:7411: no answer within 3 s; h2:7411: not the leader (the leader is h3:7411)".
  std::string failure() const;
  const std::vector<std::string>& configured() const { return configured_; }

 private:
  std::optional<std::string> store_leader() const;
  std::optional<std::string> next_untried();
  void note(const std::string& address, const std::string& what);

  std::vector<std::string> configured_;
  leader_record_reader store_leader_;
  int max_redirects_;
  int redirects_ = 0;
  std::vector<std::string> tried_;  // this round, in order
  std::vector<std::pair<std::string, std::string>> answers_;  // address, what it answered
  std::size_t rotation_ = 0;
};

}  // namespace cohort::net
