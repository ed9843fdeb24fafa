// The head's store writer (see store_writer.hpp).
#include "actors/store_writer.hpp"

#include <optional>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "core/store/store_error.hpp"
#include "net/json_inspector.hpp"

namespace cohort::actors {

namespace {

template <class F>
store_write_result attempt(F&& write) {
  try {
    write();
    return {};
  } catch (const core::store::store_error& e) {
    return {e.what(), e.kind() == core::store::store_error_kind::fenced};
  } catch (const std::exception& e) {
    return {e.what(), false};
  }
}

// The keeper's timer.
struct renew_now {};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, renew_now&) {
  return f(caf::meta::type_name("renew_now"));
}

}  // namespace

caf::behavior lease_keeper(caf::event_based_actor* self,
                           std::shared_ptr<const core::store::cluster_store> like, caf::actor head,
                           std::int64_t epoch, std::chrono::milliseconds ttl,
                           std::shared_ptr<lease_fence> fence) {
  auto store = std::make_shared<core::store::cluster_store>(like->dir(), like->options(), like->clock());
  auto address = std::make_shared<std::optional<std::string>>();  // once published, every renewal names it
  const auto renew = [=] {
    lease_renewal out;
    out.started_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    const auto outcome = renew_lease(store->lease(), fence.get(), epoch, ttl, *address);
    out.renewed = outcome.renewed;
    out.error = outcome.error;
    self->send(head, out);
  };
  self->send(self, renew_now{});
  return {
      [=](renew_now) {
        renew();
        self->delayed_send(self, ttl / 3, renew_now{});
      },
      [=](const publish_address& p) {
        *address = p.address;
        renew();  // now, not at the next tick
      },
  };
}

nlohmann::json stored_log_line(const log_line& line) { return net::to_json_view(line); }

caf::behavior store_writer(caf::event_based_actor* self,
                           std::shared_ptr<const core::store::cluster_store> like) {
  auto store = std::make_shared<core::store::cluster_store>(like->dir(), like->options(), like->clock());
  (void)self;
  return {
      [store](const store_job_state& w) {
        return attempt([&] {
          const auto& r = w.record;
          store->write_state(w.epoch, r.id, net::to_json_view(r));
          store->append_event(w.epoch, r.id,
                              {{"state", to_string(r.state)}, {"reason", r.reason}, {"attempts", r.attempts}});
        });
      },
      [store](const store_reserve_job_id& w) {
        store_reserved_id out;
        out.result = attempt([&] { out.job_id = store->reserve_job_id(w.epoch); });
        return out;
      },
      [store](const store_job_spec& w) {
        return attempt([&] { store->create_reserved_job(w.epoch, w.job_id, w.spec_json); });
      },
      [store](const store_log_lines& w) {
        return attempt([&] {
          std::vector<nlohmann::json> lines;
          lines.reserve(w.lines.size());
          for (const auto& l : w.lines) lines.push_back(stored_log_line(l));
          store->append_logs(w.epoch, w.job_id, std::move(lines));
        });
      },
      [](store_barrier) { return store_write_result{}; },
      [store](const read_job_logs& q) -> caf::result<job_logs> {
        job_logs out;
        try {
          for (const auto& j : store->read_logs(q.job_id)) {
            out.lines.push_back(net::from_json_view<log_line>(j));
            out.lines.back().job_id = q.job_id;
          }
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, std::string("cannot read the job's logs: ") + e.what());
        }
        return out;
      },
  };
}

}  // namespace cohort::actors
