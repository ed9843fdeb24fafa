// The etcd backend of the cluster store (see etcd_store.hpp for the keys and the protocol).
#include "core/store/etcd_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <cstdio>

#include "core/store/job_ids.hpp"
#include "core/store/record_checks.hpp"
#include "core/store/store_error.hpp"
#include "core/store/store_paths.hpp"

namespace cohort::core::store {

namespace {

constexpr std::size_t record_cap_bytes = 1u << 20;
constexpr std::size_t lines_per_txn = 100;  // etcd's --max-txn-ops is 128 by default

std::string b64(const std::string& s) { return base64_encode(s); }

// The first key after every key that starts with `prefix`.
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto last = static_cast<unsigned char>(prefix.back());
    if (last < 0xFF) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

std::string seq_name(std::int64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020lld", static_cast<long long>(seq));
  return buf;
}

nlohmann::json put(const std::string& key, const std::string& value, std::int64_t lease = 0) {
  nlohmann::json p{{"key", b64(key)}, {"value", b64(value)}};
  if (lease != 0) p["lease"] = std::to_string(lease);
  return {{"request_put", p}};
}

nlohmann::json delete_range(const std::string& key, const std::string& end = "") {
  nlohmann::json d{{"key", b64(key)}};
  if (!end.empty()) d["range_end"] = b64(end);
  return {{"request_delete_range", d}};
}

nlohmann::json compare(const std::string& key, const char* target, const char* result,
                       std::int64_t value) {
  static const std::map<std::string, std::string> field{
      {"CREATE", "create_revision"}, {"MOD", "mod_revision"}, {"VERSION", "version"}};
  return {{"key", b64(key)},
          {"target", target},
          {"result", result},
          {field.at(target), std::to_string(value)}};
}

std::string dump_capped(const char* what, const nlohmann::json& value) {
  auto text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > record_cap_bytes)
    throw store_error(store_error_kind::invalid, "",
                      std::string(what) + " is " + std::to_string(text.size()) +
                          " bytes; the etcd store keeps records of at most " +
                          std::to_string(record_cap_bytes) + " bytes");
  return text;
}

nlohmann::json parse_record(const std::string& key, const std::string& text, const char* what) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw store_error(store_error_kind::corrupt, key,
                      "etcd key " + key + " must hold a JSON object (" + what +
                          "); it was damaged or written outside cohort");
  return j;
}

std::int64_t ttl_seconds(std::chrono::milliseconds ttl) {
  if (ttl.count() < 0)
    throw store_error(store_error_kind::invalid, "",
                      "lease ttl must be >= 0 ms, got " + std::to_string(ttl.count()));
  return std::max<std::int64_t>(1, (ttl.count() + 999) / 1000);
}

}  // namespace

etcd_store::etcd_store(etcd_location location, store_options options, clock_ms now,
                       std::chrono::milliseconds call_timeout)
    : client_(std::move(location), call_timeout),
      prefix_(client_.location().prefix),
      options_(options),
      now_(std::move(now)),
      lease_(*this) {
  if (options_.log_line_cap_bytes == 0 || options_.etcd_log_lines_kept < 1 ||
      options_.etcd_events_kept < 1)
    throw store_error(store_error_kind::invalid, location_text(),
                      "store_options: log_line_cap_bytes, etcd_log_lines_kept and "
                      "etcd_events_kept must be > 0");
}

std::vector<etcd_store::kv> etcd_store::range(const std::string& k, const std::string& end,
                                              std::int64_t limit, bool descending) const {
  nlohmann::json body{{"key", b64(k)}};
  if (!end.empty()) body["range_end"] = b64(end);
  if (limit > 0) body["limit"] = std::to_string(limit);
  if (descending) {
    body["sort_order"] = "DESCEND";
    body["sort_target"] = "KEY";
  }
  auto answer = client_.call("/v3/kv/range", body);
  std::vector<kv> out;
  if (answer.contains("kvs") && answer["kvs"].is_array()) {
    for (const auto& j : answer["kvs"]) {
      kv item;
      item.key = base64_decode(j.value("key", ""));
      item.value = base64_decode(j.value("value", ""));
      item.create_revision = etcd_int(j, "create_revision");
      item.mod_revision = etcd_int(j, "mod_revision");
      item.lease = etcd_int(j, "lease");
      out.push_back(std::move(item));
    }
  }
  return out;
}

std::optional<etcd_store::kv> etcd_store::get(const std::string& k) const {
  auto found = range(k);
  if (found.empty()) return std::nullopt;
  return found.front();
}

std::vector<etcd_store::kv> etcd_store::range_prefix(const std::string& prefix) const {
  return range(prefix, prefix_end(prefix));
}

nlohmann::json etcd_store::txn(const nlohmann::json& compares,
                               const nlohmann::json& success) const {
  return client_.call("/v3/kv/txn", {{"compare", compares}, {"success", success}});
}

nlohmann::json etcd_store::fence(std::int64_t epoch) const {
  if (epoch == 0) return compare(key("last_leader"), "VERSION", "EQUAL", 0);
  return compare(key("leader"), "CREATE", "EQUAL", epoch);
}

void etcd_store::require_job_compare(nlohmann::json& compares, const std::string& job_id) const {
  check_name("job id", job_id);
  compares.push_back(compare(key("specs/" + job_id), "CREATE", "GREATER", 0));
}

void etcd_store::explain_failure(std::int64_t epoch, const std::string& job_id) const {
  if (!job_id.empty() && !get(key("specs/" + job_id)))
    throw store_error(store_error_kind::not_found, key("specs/" + job_id),
                      "no job '" + job_id + "' in " + location_text());
  auto held = lease_.current();
  auto current = held ? held->epoch : 0;
  if (epoch > current)
    throw store_error(store_error_kind::invalid, key("leader"),
                      "write with epoch " + std::to_string(epoch) +
                          " refused: no head ever claimed it (current epoch of " +
                          location_text() + " is " + std::to_string(current) +
                          "); take the lease first");
  if (epoch < current)
    throw store_error(store_error_kind::fenced, key("leader"),
                      "write with epoch " + std::to_string(epoch) + " refused: head '" +
                          held->head_id + "' (" + held->address + ") holds epoch " +
                          std::to_string(current) + " of " + location_text() +
                          "; this head lost the lease and must stop writing");
  if (epoch != 0 && !get(key("leader")))
    throw store_error(store_error_kind::fenced, key("leader"),
                      "write with epoch " + std::to_string(epoch) + " refused: its lease in " +
                          location_text() +
                          " expired (etcd deleted the leader key); this head must stop writing");
}

void etcd_store::require_spec(const std::string& spec_json) const {
  auto spec = nlohmann::json::parse(spec_json, nullptr, false);
  if (spec.is_discarded() || !spec.is_object())
    throw store_error(store_error_kind::invalid, "",
                      "job spec must be a JSON object (the text as submitted)");
  if (spec_json.size() > record_cap_bytes)
    throw store_error(store_error_kind::invalid, "",
                      "job spec is " + std::to_string(spec_json.size()) +
                          " bytes; the etcd store keeps specs of at most " +
                          std::to_string(record_cap_bytes) + " bytes");
}

std::string etcd_store::create_job(std::int64_t epoch, const std::string& spec_json) {
  require_spec(spec_json);
  return take_job_id(epoch, &spec_json);
}

std::string etcd_store::reserve_job_id(std::int64_t epoch) { return take_job_id(epoch, nullptr); }

void etcd_store::create_reserved_job(std::int64_t epoch, const std::string& job_id,
                                     const std::string& spec_json) {
  require_spec(spec_json);
  check_name("job id", job_id);
  const auto number = parse_job_id(job_id);
  std::int64_t last = 0;
  if (auto c = get(key("next_job_id"))) last = std::atoll(c->value.c_str());
  if (!number || *number > last)
    throw store_error(store_error_kind::invalid, key("specs/" + job_id),
                      "job id '" + job_id + "' was not reserved in " + location_text());
  const auto spec_key = key("specs/" + job_id);
  auto answer = txn(nlohmann::json::array({fence(epoch), compare(spec_key, "CREATE", "EQUAL", 0)}),
                    nlohmann::json::array({put(spec_key, spec_json)}));
  if (answer.value("succeeded", false)) return;
  explain_failure(epoch, "");
  if (auto there = get(spec_key); there && there->value == spec_json) return;  // a retry's answer lost
  throw store_error(store_error_kind::invalid, spec_key,
                    "job '" + job_id + "' has a spec already; a reserved id takes one job");
}

std::string etcd_store::take_job_id(std::int64_t epoch, const std::string* spec_json) {
  const auto counter = key("next_job_id");
  // The counter holds "<last id number> <token of the create that took it>": a create that
  // finds its txn applied (its answer lost, then retried) knows it by the token.
  static std::atomic<std::uint64_t> creates{0};
  const auto token = std::to_string(std::random_device{}()) + "-" + std::to_string(::getpid()) +
                     "-" + std::to_string(++creates);
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::int64_t last = 0, mod = 0;
    if (auto c = get(counter)) {
      try {
        last = std::stoll(c->value);
      } catch (const std::exception&) {
        throw store_error(store_error_kind::corrupt, counter,
                          "etcd key " + counter + " must hold a job number, got '" + c->value + "'");
      }
      if (c->value.size() > token.size() + 1 &&
          c->value.compare(c->value.size() - token.size(), token.size(), token) == 0)
        return format_job_id(last);  // an earlier try of this create was applied
      mod = c->mod_revision;
    }
    const auto id = format_job_id(last + 1);
    auto compares = nlohmann::json::array({fence(epoch), compare(counter, "MOD", "EQUAL", mod),
                                           compare(key("specs/" + id), "CREATE", "EQUAL", 0)});
    auto puts = nlohmann::json::array({put(counter, std::to_string(last + 1) + " " + token)});
    if (spec_json != nullptr) puts.push_back(put(key("specs/" + id), *spec_json));
    auto answer = txn(compares, puts);
    if (answer.value("succeeded", false)) return id;
    explain_failure(epoch, "");
    // The counter moved (another store object took the id), or this very txn was applied and
    // its answer lost: the next read of the counter tells.
  }
  throw store_error(store_error_kind::io, counter,
                    "could not take a job id from " + counter + " in 100 tries: too many writers");
}

void etcd_store::write_state(std::int64_t epoch, const std::string& job_id,
                             const nlohmann::json& state) {
  require_object("job state", state);
  auto stored = state;
  stored["epoch"] = epoch;
  auto text = dump_capped("job state", stored);
  auto compares = nlohmann::json::array({fence(epoch)});
  require_job_compare(compares, job_id);
  auto answer = txn(compares, nlohmann::json::array({put(key("states/" + job_id), text)}));
  if (answer.value("succeeded", false)) return;
  explain_failure(epoch, job_id);
  throw store_error(store_error_kind::io, key("states/" + job_id),
                    "etcd refused the state of " + job_id + " for no reason it reported");
}

std::int64_t etcd_store::last_seq(const std::string& dir) const {
  auto last = range(dir, prefix_end(dir), 1, true);
  if (last.empty()) return 0;
  auto name = last.front().key.substr(dir.size());
  try {
    return std::stoll(name);
  } catch (const std::exception&) {
    throw store_error(store_error_kind::corrupt, last.front().key,
                      "etcd key " + last.front().key + " is not <sequence number> under " + dir);
  }
}

void etcd_store::append_sequenced(std::int64_t epoch, const std::string& job_id,
                                  const std::string& dir, std::map<std::string, std::int64_t>& next,
                                  std::int64_t kept, std::vector<nlohmann::json> records,
                                  bool stamp_seq) {
  std::size_t begin = 0;
  while (begin < records.size()) {
    const auto end = std::min(records.size(), begin + lines_per_txn);
    bool retried = false;
    for (int attempt = 0;; ++attempt) {
      auto it = next.find(job_id);
      if (it == next.end() || retried) it = next.insert_or_assign(job_id, last_seq(dir)).first;
      auto seq = it->second;
      const auto last = seq + std::int64_t(end - begin);
      // Records that the cap would drop at once are not written; the delete covers only keys
      // older than this txn's (etcd refuses a txn that names one key twice).
      const auto first = std::max(seq + 1, last - kept + 1);
      auto compares = nlohmann::json::array({fence(epoch)});
      require_job_compare(compares, job_id);
      compares.push_back(compare(dir + seq_name(first), "CREATE", "EQUAL", 0));
      auto ops = nlohmann::json::array();
      std::string first_value;
      for (auto i = begin; i < end; ++i) {
        const auto n = seq + 1 + std::int64_t(i - begin);
        if (stamp_seq) records[i]["seq"] = n;
        if (n < first) continue;
        auto text = records[i].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        if (n == first) first_value = text;
        ops.push_back(put(dir + seq_name(n), text));
      }
      if (last > kept) ops.push_back(delete_range(dir, dir + seq_name(last - kept + 1)));
      auto answer = txn(compares, ops);
      if (answer.value("succeeded", false)) {
        it->second = last;
        break;
      }
      explain_failure(epoch, job_id);
      // The key was taken: this txn applied with its answer lost (the first record is ours),
      // or another store object appended meanwhile (read the last number again).
      auto there = get(dir + seq_name(first));
      if (there && there->value == first_value) {
        it->second = last;
        break;
      }
      if (attempt >= 10)
        throw store_error(store_error_kind::io, dir,
                          "could not append under " + dir + " in 10 tries: too many writers");
      retried = true;
    }
    begin = end;
  }
}

void etcd_store::append_event(std::int64_t epoch, const std::string& job_id,
                              nlohmann::json event) {
  require_object("job event", event);
  check_name("job id", job_id);
  if (!event.contains("ts")) event["ts"] = now_();
  event["epoch"] = epoch;
  dump_capped("job event", event);
  append_sequenced(epoch, job_id, key("events/" + job_id + "/"), last_event_seq_,
                   options_.etcd_events_kept, {std::move(event)}, false);
}

void etcd_store::append_logs(std::int64_t epoch, const std::string& job_id,
                             std::vector<nlohmann::json> lines) {
  for (const auto& line : lines) require_object("log line", line);
  check_name("job id", job_id);
  if (lines.empty()) {
    auto compares = nlohmann::json::array({fence(epoch)});
    require_job_compare(compares, job_id);
    if (!txn(compares, nlohmann::json::array()).value("succeeded", false))
      explain_failure(epoch, job_id);
    return;
  }
  for (auto& line : lines) {
    if (!line.contains("ts")) line["ts"] = now_();
    auto text = line.find("line");
    if (text != line.end() && text->is_string() &&
        text->get_ref<const std::string&>().size() > options_.log_line_cap_bytes) {
      cut_utf8(text->get_ref<std::string&>(), options_.log_line_cap_bytes);
      line["truncated"] = true;
    }
  }
  append_sequenced(epoch, job_id, key("logs/" + job_id + "/"), last_log_seq_,
                   options_.etcd_log_lines_kept, std::move(lines), true);
}

std::optional<stored_job> etcd_store::load_job(const std::string& job_id) const {
  check_name("job id", job_id);
  auto spec = get(key("specs/" + job_id));
  if (!spec) return std::nullopt;
  stored_job job{job_id, spec->value, std::nullopt};
  if (auto state = get(key("states/" + job_id)))
    job.state = parse_record(state->key, state->value, "the job record");
  return job;
}

std::vector<stored_job> etcd_store::list_jobs() const {
  std::map<std::string, stored_job> jobs;
  const auto specs = key("specs/"), states = key("states/");
  for (auto& s : range_prefix(specs)) {
    auto id = s.key.substr(specs.size());
    jobs[id] = stored_job{id, std::move(s.value), std::nullopt};
  }
  for (auto& s : range_prefix(states)) {
    auto it = jobs.find(s.key.substr(states.size()));
    if (it != jobs.end()) it->second.state = parse_record(s.key, s.value, "the job record");
  }
  std::vector<stored_job> out;
  for (auto& [id, job] : jobs) out.push_back(std::move(job));
  std::sort(out.begin(), out.end(),
            [](const stored_job& a, const stored_job& b) { return job_id_less(a.id, b.id); });
  return out;
}

std::vector<nlohmann::json> etcd_store::read_events(const std::string& job_id) const {
  check_name("job id", job_id);
  if (!get(key("specs/" + job_id)))
    throw store_error(store_error_kind::not_found, key("specs/" + job_id),
                      "no job '" + job_id + "' in " + location_text());
  std::vector<nlohmann::json> out;
  for (const auto& e : range_prefix(key("events/" + job_id + "/")))
    out.push_back(parse_record(e.key, e.value, "a history line"));
  return out;
}

std::vector<nlohmann::json> etcd_store::read_logs(const std::string& job_id,
                                                  std::int64_t after_seq) const {
  check_name("job id", job_id);
  if (!get(key("specs/" + job_id)))
    throw store_error(store_error_kind::not_found, key("specs/" + job_id),
                      "no job '" + job_id + "' in " + location_text());
  const auto dir = key("logs/" + job_id + "/");
  std::vector<nlohmann::json> out;
  for (const auto& l : range(dir + seq_name(std::max<std::int64_t>(0, after_seq) + 1),
                             prefix_end(dir)))
    out.push_back(parse_record(l.key, l.value, "a log line"));
  return out;
}

void etcd_store::write_node(std::int64_t epoch, const std::string& name,
                            const nlohmann::json& node) {
  check_name("node name", name);
  require_object("node record", node);
  auto stored = node;
  stored["epoch"] = epoch;
  stored["updated_at"] = now_();
  auto text = dump_capped("node record", stored);
  if (!txn(nlohmann::json::array({fence(epoch)}),
           nlohmann::json::array({put(key("nodes/" + name), text)}))
           .value("succeeded", false)) {
    explain_failure(epoch, "");
    throw store_error(store_error_kind::io, key("nodes/" + name),
                      "etcd refused node record " + name + " for no reason it reported");
  }
}

void etcd_store::remove_node(std::int64_t epoch, const std::string& name) {
  check_name("node name", name);
  if (!txn(nlohmann::json::array({fence(epoch)}),
           nlohmann::json::array({delete_range(key("nodes/" + name))}))
           .value("succeeded", false)) {
    explain_failure(epoch, "");
    throw store_error(store_error_kind::io, key("nodes/" + name),
                      "etcd refused to remove node record " + name + " for no reason it reported");
  }
}

std::vector<nlohmann::json> etcd_store::list_nodes() const {
  std::vector<nlohmann::json> out;
  for (const auto& n : range_prefix(key("nodes/")))
    out.push_back(parse_record(n.key, n.value, "a node record"));
  return out;
}

// --- the lease ---------------------------------------------------------------------------------

std::optional<lease_record> etcd_lease::current() const {
  const auto now = store_.now_();
  if (auto held = store_.get(store_.key("leader"))) {
    auto j = parse_record(held->key, held->value, "the leader lease");
    lease_record r;
    r.epoch = held->create_revision;
    r.head_id = j.value("head_id", "");
    r.address = j.value("address", "");
    r.expires_at_ms = now + std::max<std::int64_t>(1, j.value("ttl_ms", std::int64_t{1}));
    return r;
  }
  auto last = store_.get(store_.key("last_leader"));
  if (!last) return std::nullopt;
  auto j = parse_record(last->key, last->value, "a lease");
  if (!j.contains("epoch")) j["epoch"] = last->mod_revision;
  auto r = lease_record::from_json(last->key, j);
  r.expires_at_ms = std::min(r.expires_at_ms, now);  // etcd deleted the leader key: it expired
  return r;
}

bool etcd_lease::wait_for_change(std::chrono::milliseconds timeout) {
  std::optional<etcd_store::kv> held;
  try {
    held = store_.get(store_.key("leader"));
  } catch (const store_error&) {
    return false;  // etcd unreachable: the caller waits and polls
  }
  if (!held) return true;  // no leader now: try to take it at once
  const auto start = std::chrono::steady_clock::now();
  if (store_.client_.watch(
          {{"key", b64(held->key)}, {"start_revision", std::to_string(held->mod_revision + 1)}},
          timeout))
    return true;
  // No event: it waited out the timeout (true), or the watch failed early (false: the caller
  // waits, rather than asking again at once).
  return std::chrono::steady_clock::now() - start >= timeout * 9 / 10;
}

std::int64_t etcd_lease::current_epoch() const {
  auto r = current();
  return r ? r->epoch : 0;
}

std::optional<lease_record> etcd_lease::acquire(const std::string& head_id,
                                                const std::string& address,
                                                std::chrono::milliseconds ttl) {
  if (head_id.empty())
    throw store_error(store_error_kind::invalid, "", "lease head_id must not be empty");
  const auto seconds = ttl_seconds(ttl);
  if (auto held = store_.get(store_.key("leader"))) {
    auto j = parse_record(held->key, held->value, "the leader lease");
    if (j.value("head_id", "") == head_id) return renew(held->create_revision, ttl, address);
    return std::nullopt;
  }
  auto grant = store_.client_.call("/v3/lease/grant", {{"TTL", std::to_string(seconds)}});
  const auto lease_id = etcd_int(grant, "ID");
  const auto granted_ms = std::max(etcd_int(grant, "TTL"), seconds) * 1000;
  lease_record mine{0, head_id, address, store_.now_() + granted_ms};
  nlohmann::json value{{"head_id", head_id},
                       {"address", address},
                       {"expires_at", mine.expires_at_ms},
                       {"ttl_ms", granted_ms}};
  const auto leader = store_.key("leader");
  // The last_leader record without "epoch": the txn's revision, its mod_revision, is the epoch.
  auto last = mine.to_json();
  last.erase("epoch");
  auto answer = store_.txn(
      nlohmann::json::array({compare(leader, "CREATE", "EQUAL", 0)}),
      nlohmann::json::array({put(leader, value.dump(), lease_id),
                             put(store_.key("last_leader"), last.dump())}));
  if (!answer.value("succeeded", false)) {
    store_.client_.call("/v3/lease/revoke", {{"ID", std::to_string(lease_id)}});
    return std::nullopt;  // another contender created the key first
  }
  mine.epoch = etcd_int(answer.value("header", nlohmann::json::object()), "revision");
  return mine;
}

std::optional<lease_record> etcd_lease::renew(std::int64_t epoch, std::chrono::milliseconds ttl) {
  auto held = current();
  if (!held || held->epoch != epoch) return std::nullopt;
  return renew(epoch, ttl, held->address);
}

std::optional<lease_record> etcd_lease::renew(std::int64_t epoch, std::chrono::milliseconds ttl,
                                              const std::string& address) {
  ttl_seconds(ttl);
  const auto leader = store_.key("leader");
  auto held = store_.get(leader);
  if (!held || held->create_revision != epoch) return std::nullopt;
  auto alive = store_.client_.call("/v3/lease/keepalive", {{"ID", std::to_string(held->lease)}});
  const auto left_s = etcd_int(alive.value("result", nlohmann::json::object()), "TTL");
  if (left_s <= 0) return std::nullopt;  // etcd let the lease go: the key is gone with it
  auto j = parse_record(held->key, held->value, "the leader lease");
  lease_record r{epoch, j.value("head_id", ""), address, store_.now_() + left_s * 1000};
  if (address != j.value("address", "")) {
    j["address"] = address;
    j["expires_at"] = r.expires_at_ms;
    auto answer = store_.txn(nlohmann::json::array({compare(leader, "CREATE", "EQUAL", epoch)}),
                             nlohmann::json::array({put(leader, j.dump(), held->lease),
                                                    put(store_.key("last_leader"),
                                                        r.to_json().dump())}));
    if (!answer.value("succeeded", false)) return std::nullopt;
  }
  return r;
}

bool etcd_lease::release(std::int64_t epoch) {
  const auto leader = store_.key("leader");
  auto held = store_.get(leader);
  if (!held || held->create_revision != epoch) return false;
  auto j = parse_record(held->key, held->value, "the leader lease");
  lease_record r{epoch, j.value("head_id", ""), j.value("address", ""), store_.now_()};
  auto answer = store_.txn(
      nlohmann::json::array({compare(leader, "CREATE", "EQUAL", epoch)}),
      nlohmann::json::array({delete_range(leader), put(store_.key("last_leader"), r.to_json().dump())}));
  if (!answer.value("succeeded", false)) return false;
  store_.client_.call("/v3/lease/revoke", {{"ID", std::to_string(held->lease)}});
  return true;
}

}  // namespace cohort::core::store
