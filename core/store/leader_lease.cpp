// Leader lease with epochs (see leader_lease.hpp for the protocol and its limits).
#include "core/store/leader_lease.hpp"

#include "core/store/atomic_file.hpp"
#include "core/store/store_error.hpp"
#include "core/store/store_paths.hpp"

namespace cohort::core::store {

namespace {

// The epoch a claim file's name stands for, or -1 for any other name (temp files, strays).
std::int64_t epoch_of_name(const std::string& name) {
  if (name.empty() || name.size() > 18) return -1;
  std::int64_t n = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

[[noreturn]] void bad_field(const std::filesystem::path& path, const char* field,
                            const char* expected) {
  throw store_error(store_error_kind::corrupt, path.string(),
                    path.string() + ": field '" + field + "' must be " + expected +
                        "; the lease file was damaged or edited outside cohort");
}

}  // namespace

std::int64_t system_clock_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

nlohmann::json lease_record::to_json() const {
  return {
      {"epoch", epoch}, {"head_id", head_id}, {"address", address}, {"expires_at", expires_at_ms}};
}

lease_record lease_record::from_json(const std::filesystem::path& path, const nlohmann::json& j) {
  if (!j.is_object()) bad_field(path, "(top level)", "an object");
  lease_record r;
  if (!j.contains("epoch") || !j["epoch"].is_number_integer() || j["epoch"].get<std::int64_t>() < 1)
    bad_field(path, "epoch", "an integer >= 1");
  if (!j.contains("head_id") || !j["head_id"].is_string()) bad_field(path, "head_id", "a string");
  if (!j.contains("address") || !j["address"].is_string()) bad_field(path, "address", "a string");
  if (!j.contains("expires_at") || !j["expires_at"].is_number_integer())
    bad_field(path, "expires_at", "an integer (unix milliseconds)");
  r.epoch = j["epoch"].get<std::int64_t>();
  r.head_id = j["head_id"].get<std::string>();
  r.address = j["address"].get<std::string>();
  r.expires_at_ms = j["expires_at"].get<std::int64_t>();
  return r;
}

leader_lease::leader_lease(std::filesystem::path store_dir, clock_ms now)
    : store_dir_(std::move(store_dir)), now_(std::move(now)) {
  ensure_dir(epochs_dir(store_dir_));
}

std::int64_t leader_lease::highest_claim() const {
  std::int64_t highest = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(epochs_dir(store_dir_), ec), end; !ec && it != end;
       it.increment(ec))
    highest = std::max(highest, epoch_of_name(it->path().filename().string()));
  if (ec)
    throw store_error(store_error_kind::io, epochs_dir(store_dir_).string(),
                      "cannot list " + epochs_dir(store_dir_).string() + ": " + ec.message());
  return highest;
}

std::optional<lease_record> leader_lease::current() const {
  auto claim = highest_claim();
  auto published_path = leader_path(store_dir_);
  if (auto published = read_json(published_path)) {
    auto record = lease_record::from_json(published_path, *published);
    if (record.epoch >= claim) return record;
  }
  if (claim == 0) return std::nullopt;
  auto claim_path = epochs_dir(store_dir_) / std::to_string(claim);
  auto text = read_json(claim_path);
  if (!text)
    throw store_error(store_error_kind::io, claim_path.string(),
                      "lease claim " + claim_path.string() +
                          " vanished while being read: claim files must never be removed");
  auto record = lease_record::from_json(claim_path, *text);
  if (record.epoch != claim) bad_field(claim_path, "epoch", "the file's name");
  return record;
}

std::int64_t leader_lease::current_epoch() const {
  auto record = current();
  return record ? record->epoch : 0;
}

std::int64_t leader_lease::expiry(std::chrono::milliseconds ttl) const {
  if (ttl.count() < 0)
    throw store_error(store_error_kind::invalid, "",
                      "lease ttl must be >= 0 ms, got " + std::to_string(ttl.count()));
  return now_() + ttl.count();
}

std::optional<lease_record> leader_lease::publish(const lease_record& record) {
  write_json_atomic(leader_path(store_dir_), record.to_json());
  // A contender that claimed a higher epoch meanwhile wins; our leader.json is then ignored.
  if (current_epoch() != record.epoch) return std::nullopt;
  return record;
}

std::optional<lease_record> leader_lease::acquire(const std::string& head_id,
                                                  const std::string& address,
                                                  std::chrono::milliseconds ttl) {
  if (head_id.empty())
    throw store_error(store_error_kind::invalid, "", "lease head_id must not be empty");
  auto expires = expiry(ttl);
  auto held = current();
  if (held && held->head_id == head_id) return renew(held->epoch, ttl);
  if (held && !held->expired_at(now_())) return std::nullopt;
  lease_record mine{(held ? held->epoch : 0) + 1, head_id, address, expires};
  if (!create_exclusive(
          epochs_dir(store_dir_) / std::to_string(mine.epoch),
          mine.to_json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"))
    return std::nullopt;  // another contender won this epoch
  return publish(mine);
}

std::optional<lease_record> leader_lease::renew(std::int64_t epoch, std::chrono::milliseconds ttl) {
  auto expires = expiry(ttl);
  auto held = current();
  if (!held || held->epoch != epoch) return std::nullopt;
  held->expires_at_ms = expires;
  return publish(*held);
}

std::optional<lease_record> leader_lease::renew(std::int64_t epoch, std::chrono::milliseconds ttl,
                                               const std::string& address) {
  auto expires = expiry(ttl);
  auto held = current();
  if (!held || held->epoch != epoch) return std::nullopt;
  held->expires_at_ms = expires;
  held->address = address;
  return publish(*held);
}

bool leader_lease::release(std::int64_t epoch) {
  auto held = current();
  if (!held || held->epoch != epoch) return false;
  held->expires_at_ms = now_();
  return publish(*held).has_value();
}

}  // namespace cohort::core::store
