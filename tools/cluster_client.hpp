// The blocking client `submit` uses to talk to the leading cluster-head over the CURVE wire:
// connect with the cluster's credentials to the first head of an address list that answers
// (or the one the store's leader record names: a shared directory's or etcd's), send one
// request, follow "not the leader; the leader is X" redirects, wait for the reply (or a
// request_failed), and receive the events of a followed job.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <caf/message.hpp>

#include "actors/client_protocol.hpp"
#include "actors/messages.hpp"
#include "net/bridge_messages.hpp"
#include "net/head_addresses.hpp"
#include "net/wire_client.hpp"

namespace cohort::tools {

// What went wrong talking to the head: cannot connect, refused, no reply, or the head's answer.
class client_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads the leader record of the store `store_dir` (<store>/cluster/leader.json), or of the etcd
// store it names ("etcd://HOST:PORT[,...][/prefix]": the leader key, by a serializable read, so
// a member answers during an etcd election too, through one etcd client of 2 s calls kept by the
// reader, which is safe to call from any thread): the leader's address while its lease is live;
// nullopt when there is no record, it expired, or the store cannot be read. The etcd location
// must parse (core::store::parse_etcd_location), else store_error.
net::leader_record_reader store_leader_reader(const std::filesystem::path& store_dir);
// The store a credentials file lies in (<store>/cluster/credentials.json), when it holds a leader
// record; nullopt for a copied credentials file.
std::optional<std::filesystem::path> store_of_credentials(const std::filesystem::path& credentials_file);

class cluster_client {
 public:
  // Connects to the first head of `addresses` ("h1:7411,h2:7411"; may be empty when `store_dir`
  // holds the leader record) that answers, with the credentials file; a live leader the store
  // names is tried first when it is one of the addresses (or none are given), last otherwise.
  // Throws client_error when no head answers within connect_timeout, or at once when a head
  // refuses the credentials (or they its key): that address belongs to another cluster.
  cluster_client(const std::string& addresses, const std::string& credentials_file,
                 std::optional<std::filesystem::path> store_dir = std::nullopt,
                 std::chrono::milliseconds connect_timeout = std::chrono::seconds(10));
  ~cluster_client();

  // Sends `request` (a request of actors::client_calls) to the leader and returns the first reply
  // of the type the table names for it, passing over events
  // of a followed job that arrive meanwhile. A standby's not_leader sends the request on to the
  // head it names (at most net::leader_search::default_max_redirects times); a request_failed
  // from the head becomes client_error. A query (status, list, logs, follow, plan) whose head
  // does not answer within `timeout` goes to the next head that answers.
  template <class Request>
  actors::reply_to<Request> ask(const Request& request,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    using Reply = actors::reply_to<Request>;
    for (;;) {
      client_->send(request);
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      std::optional<caf::message> msg;
      for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        msg = left.count() > 0 ? next(left) : std::nullopt;
        if (!msg || !is_event(*msg)) break;
      }
      if (!msg) {
        const auto why = "the head at " + address_ + " did not answer within " + seconds(timeout);
        // A query may go to another head (the leader may have died); a command may have been
        // carried out by the silent head, so it is not sent twice.
        if (!actors::retry_safe<Request>) throw client_error(why);
        move_on(why);
        continue;
      }
      if (msg->match_element<net::not_leader>(0)) {
        follow_redirect(msg->get_as<net::not_leader>(0));
        continue;
      }
      search_.found(address_);
      return unpack<Reply>(*msg);
    }
  }
  // The address of the head this client talks to now.
  const std::string& address() const { return address_; }
  // How many times the link to the head was (re)established; grows when the head came back or
  // the client moved to another head.
  std::uint64_t connections() const { return client_->status().handshakes + moved_; }
  // The next message from the head, or nullopt after the timeout.
  std::optional<caf::message> next(std::chrono::milliseconds timeout);
  template <class Reply>
  static Reply unpack(const caf::message& msg);

 private:
  // The head at address_ failed (`why`): connects to the next candidate; throws client_error
  // (just `why` when there is no other) when none answers.
  void move_on(const std::string& why);
  // Connects to `first`, else to the next candidate that answers; throws client_error when none.
  void connect_from(std::string first);
  struct attempt {
    std::string why;                    // "" once connected
    bool credentials_mismatch = false;  // the head refused our key, or we its
  };
  attempt try_connect(const std::string& address, std::chrono::milliseconds timeout);
  void follow_redirect(const net::not_leader& answer);
  static std::string seconds(std::chrono::milliseconds d);
  static bool is_event(const caf::message& msg);
  [[noreturn]] static void fail_with(const caf::message& msg);

  std::string credentials_file_;
  std::chrono::milliseconds connect_timeout_;
  net::leader_search search_;
  std::string address_;
  std::uint64_t moved_ = 0;
  std::unique_ptr<net::wire_client> client_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<caf::message> inbox_;
};

template <class Reply>
Reply cluster_client::unpack(const caf::message& msg) {
  if (msg.match_element<Reply>(0)) return msg.get_as<Reply>(0);
  fail_with(msg);
}

// Streams the events of job `id` to on_event until the job ends or `until` passes, and returns
// the newest record (not terminal when `until` passed first). `last`: the record the follow
// request (follow_job or follow_logs) answered, passed to on_event first. Events of other jobs
// (one followed before) are passed over. A head that restarts forgets its followers: after a
// quiet spell (at most 5 s) the client asks again, and follows anew once the link was
// re-established (to the same head, or to a new leader the client moved to when its head stopped
// answering).
template <class OnEvent>
actors::job_record follow_job_events(cluster_client& client, const std::string& id, actors::job_record last,
                                     OnEvent on_event,
                                     std::chrono::steady_clock::time_point until =
                                         std::chrono::steady_clock::time_point::max()) {
  // How long a followed job's status query waits before the client tries the next head.
  constexpr std::chrono::seconds quiet_query_timeout{10};
  constexpr std::chrono::milliseconds quiet_spell{5000};
  on_event(actors::job_event{last, ""});
  auto connections = client.connections();
  while (!actors::is_terminal(last.state)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) break;
    const auto left = until == std::chrono::steady_clock::time_point::max()
                          ? quiet_spell
                          : std::min(quiet_spell, std::chrono::duration_cast<std::chrono::milliseconds>(until - now) +
                                                      std::chrono::milliseconds(1));
    auto msg = client.next(left);
    if (msg) {
      if (!msg->match_element<actors::job_event>(0)) continue;  // a stale reply
      auto e = msg->get_as<actors::job_event>(0);
      if (e.record.id != id) continue;
      on_event(e);
      last = e.record;
      continue;
    }
    if (left < quiet_spell) continue;  // `until` passed, not a quiet spell
    if (client.connections() != connections) {
      connections = client.connections();
      last = client.ask(actors::follow_job{id});
    } else {
      last = client.ask(actors::job_query{id}, quiet_query_timeout);
    }
    on_event(actors::job_event{last, ""});
  }
  return last;
}

}  // namespace cohort::tools
