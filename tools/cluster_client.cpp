// Blocking wire client for `submit` (see cluster_client.hpp).
#include "tools/cluster_client.hpp"

#include <limits>
#include <mutex>

#include "actors/messages.hpp"
#include "actors/wire_protocol.hpp"
#include "core/store/cluster_store.hpp"
#include "core/store/etcd_client.hpp"
#include "core/store/leader_lease.hpp"
#include "core/store/store_paths.hpp"
#include "net/credentials.hpp"
#include "net/net_error.hpp"

namespace cohort::tools {

namespace {

// A live leader's address from a lease record; nullopt for an expired one or one that names no host.
std::optional<std::string> live_address(const std::optional<core::store::lease_record>& record) {
  if (!record || record->expired_at(core::store::system_clock_ms())) return std::nullopt;
  // A head bound to every interface that published that address names no host to go to.
  const auto host = record->address.substr(0, record->address.rfind(':'));
  if (host == "0.0.0.0" || host == "*" || host == "::" || host.empty()) return std::nullopt;
  return record->address;
}

// The leader key of an etcd store (P/leader, see etcd_store.hpp: it exists only while the
// leader's etcd lease is live), read through one client kept between calls (a node's gateway asks
// on every heartbeat); a mutex makes the reader safe to call from any thread. A serializable read:
// any member answers from its own state, also while etcd elects a leader, so the node is not held
// up. A lagging member may still show a key that was replaced: a record older (lower create
// revision, the lease's epoch) than one this reader returned already counts as none, so a node
// never leaves a new leader for the one it replaced.
net::leader_record_reader etcd_leader_reader(const std::string& location) {
  struct shared {
    explicit shared(const std::string& location)
        : client(core::store::parse_etcd_location(location), std::chrono::seconds(2)) {}
    std::mutex mutex;
    core::store::etcd_client client;
    std::int64_t newest = 0;  // the highest create revision returned
  };
  auto state = std::make_shared<shared>(location);
  return [state]() -> std::optional<std::string> {
    std::lock_guard<std::mutex> lock(state->mutex);
    try {
      const auto key = state->client.location().prefix + "/leader";
      const auto answer = state->client.call(
          "/v3/kv/range", {{"key", core::store::base64_encode(key)}, {"serializable", true}});
      if (!answer.contains("kvs") || !answer["kvs"].is_array() || answer["kvs"].empty()) return std::nullopt;
      const auto revision = core::store::etcd_int(answer["kvs"][0], "create_revision");
      if (revision < state->newest) return std::nullopt;
      const auto record = nlohmann::json::parse(
          core::store::base64_decode(answer["kvs"][0].value("value", "")), nullptr, false);
      if (!record.is_object() || !record.contains("address") || !record["address"].is_string())
        return std::nullopt;
      core::store::lease_record live;
      live.address = record["address"].get<std::string>();
      live.expires_at_ms = std::numeric_limits<std::int64_t>::max();  // the key exists: the lease is live
      auto address = live_address(live);
      if (address) state->newest = revision;
      return address;
    } catch (const std::exception&) {
      return std::nullopt;  // etcd unreachable: the configured addresses still count
    }
  };
}

}  // namespace

net::leader_record_reader store_leader_reader(const std::filesystem::path& store_dir) {
  if (core::store::is_etcd_location(store_dir.string())) return etcd_leader_reader(store_dir.string());
  return [store_dir]() -> std::optional<std::string> {
    try {
      std::error_code ec;
      if (!std::filesystem::exists(core::store::leader_path(store_dir), ec)) return std::nullopt;
      return live_address(core::store::leader_lease(store_dir).current());
    } catch (const std::exception&) {
      return std::nullopt;  // an unreadable record: the configured addresses still count
    }
  };
}

std::optional<std::filesystem::path> store_of_credentials(const std::filesystem::path& credentials_file) {
  const auto store = credentials_file.parent_path().parent_path();
  std::error_code ec;
  if (credentials_file.parent_path().filename() != "cluster" ||
      !std::filesystem::exists(core::store::leader_path(store), ec))
    return std::nullopt;
  return store;
}

namespace {

std::vector<std::string> parse_or_none(const std::string& addresses) {
  if (addresses.empty()) return {};
  try {
    return net::parse_head_addresses(addresses);
  } catch (const std::exception& e) {
    throw client_error(e.what());
  }
}

net::leader_search make_search(const std::string& addresses,
                               const std::optional<std::filesystem::path>& store_dir) {
  try {
    return net::leader_search(parse_or_none(addresses),
                              store_dir ? store_leader_reader(*store_dir) : net::leader_record_reader{});
  } catch (const net::net_error& e) {
    throw client_error(e.what());
  }
}

}  // namespace

cluster_client::cluster_client(const std::string& addresses, const std::string& credentials_file,
                               std::optional<std::filesystem::path> store_dir,
                               std::chrono::milliseconds connect_timeout)
    : credentials_file_(credentials_file), connect_timeout_(connect_timeout),
      search_(make_search(addresses, store_dir)) {
  net::load_credentials(credentials_file_);  // a bad file fails here, naming its field
  connect_from(search_.first());
}

cluster_client::~cluster_client() {
  if (client_) client_->stop();
}

cluster_client::attempt cluster_client::try_connect(const std::string& address,
                                                    std::chrono::milliseconds timeout) {
  if (client_) {
    moved_ += client_->status().handshakes + 1;  // connections() keeps growing across heads
    client_->stop();
  }
  client_.reset();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox_.clear();  // replies of the head left behind are no answer to what comes next
  }
  auto creds = net::load_credentials(credentials_file_);
  auto options = net::client_options::from(creds, address);
  client_ = std::make_unique<net::wire_client>(actors::make_wire_codec(), options,
                                               [this](caf::message msg) {
                                                 std::lock_guard<std::mutex> lock(mutex_);
                                                 inbox_.push_back(std::move(msg));
                                                 arrived_.notify_all();
                                               });
  client_->start();
  address_ = address;
  switch (client_->wait_for_link(timeout)) {
    case net::link_state::connected:
      return {};
    case net::link_state::refused:
      return {"the head at " + address + " refused these credentials (" + credentials_file_ +
                  " belongs to another cluster, or is stale)",
              true};
    case net::link_state::handshake_failed:
      return {"the CURVE handshake with " + address + " failed: " + credentials_file_ +
                  " does not match this head's keys",
              true};
    case net::link_state::connecting:
      break;
  }
  return {"no answer from a head at " + address + " within " + seconds(timeout) +
              " (is cluster-head running there?)",
          false};
}

void cluster_client::connect_from(std::string address) {
  // Several candidates share the connect timeout, each at least 2 s.
  const auto candidates = std::max<std::size_t>(1, search_.configured().size());
  const auto each = std::max(std::chrono::milliseconds(2000),
                             connect_timeout_ / static_cast<long>(candidates));
  std::size_t failed = 0;
  std::string last_why;
  while (!address.empty()) {
    const auto tried = try_connect(address, candidates == 1 ? connect_timeout_ : each);
    if (tried.why.empty()) return;
    // Keys that do not match: the address is another cluster's (heads sharing a store share
    // keys), a mistake to report, not a head to look past.
    if (tried.credentials_mismatch) throw client_error(tried.why);
    ++failed;
    last_why = tried.why;
    auto next = search_.unreachable(address, tried.why);
    if (!next) break;
    address = *next;
  }
  // One address: its own reason, as before lists existed.
  throw client_error(failed == 1 ? last_why : search_.failure());
}

void cluster_client::move_on(const std::string& why) {
  auto next = search_.unreachable(address_, why);
  if (!next) throw client_error(search_.configured().size() <= 1 ? why : search_.failure());
  connect_from(*next);
}

void cluster_client::follow_redirect(const net::not_leader& answer) {
  auto next = search_.redirected(address_, answer.leader, answer.message);
  if (!next) throw client_error(search_.failure());
  connect_from(*next);
}

std::optional<caf::message> cluster_client::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!arrived_.wait_for(lock, timeout, [this] { return !inbox_.empty(); })) return std::nullopt;
  auto msg = std::move(inbox_.front());
  inbox_.pop_front();
  return msg;
}

std::string cluster_client::seconds(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + " s";
}

bool cluster_client::is_event(const caf::message& msg) {
  return msg.match_element<actors::job_event>(0);
}

void cluster_client::fail_with(const caf::message& msg) {
  if (msg.match_element<net::request_failed>(0))
    throw client_error(msg.get_as<net::request_failed>(0).message);
  throw client_error("unexpected reply from the head: " + to_string(msg));
}

}  // namespace cohort::tools
