// Proxies and exports of the bridge between processes (see bridge.hpp).
#include "actors/bridge.hpp"

#include "net/bridge_messages.hpp"

namespace cohort::actors {

caf::behavior remote_proxy(caf::event_based_actor* self, std::string endpoint, caf::actor gateway) {
  self->send(gateway, proxy_hello{});  // before anything it forwards
  self->set_default_handler(
      [=](caf::scheduled_actor*, caf::message_view& view) -> caf::result<caf::message> {
        self->send(gateway, outgoing_message{endpoint, self->current_sender(),
                                             view.move_content_to_message()});
        return caf::message{};
      });
  return {
      [=](const proxy_flush& f) { self->send(gateway, proxy_flushed{f.token}); },
      [=](const proxy_quit& q) {
        if (q.reason.empty())
          self->quit();
        else
          self->quit(caf::make_error(caf::sec::runtime_error, q.reason));
      },
  };
}

void bridge_state::export_as(caf::local_actor* self, const std::string& name,
                             const caf::actor& actor) {
  auto endpoint = process_ + "/" + name;
  exports_[endpoint] = actor;
  export_names_[actor.address()] = endpoint;
  self->monitor(actor);
}

std::string bridge_state::endpoint_of(caf::local_actor* self, const caf::strong_actor_ptr& ptr) {
  if (!ptr) return process_ + "/anonymous";
  auto actor = caf::actor_cast<caf::actor>(ptr);
  // A proxy stands for its remote endpoint: a message relayed through it keeps that identity.
  if (auto p = proxy_names_.find(actor.address()); p != proxy_names_.end()) return p->second;
  if (auto e = export_names_.find(actor.address()); e != export_names_.end()) return e->second;
  export_as(self, "a" + std::to_string(actor.id()), actor);
  return export_names_.at(actor.address());
}

caf::actor bridge_state::proxy_for(caf::local_actor* self, const std::string& endpoint) {
  if (auto it = proxies_.find(endpoint); it != proxies_.end()) return it->second;
  auto proxy = self->spawn(remote_proxy, endpoint, caf::actor_cast<caf::actor>(self));
  proxies_[endpoint] = proxy;  // monitored once its hello arrives (add_proxy)
  proxy_names_[proxy.address()] = endpoint;
  return proxy;
}

bool bridge_state::deliver(caf::local_actor* self, const std::string& to, const std::string& from,
                           const std::string& payload, std::string& problem) {
  auto target = exports_.find(to);
  if (target == exports_.end()) {
    problem = "no endpoint " + to + " in this process";
    return false;
  }
  auto inner = codec_->decode(payload.data(), payload.size());
  if (!inner.ok()) {
    problem = "bad payload from " + from + ": " + inner.detail;
    return false;
  }
  auto source = caf::actor_cast<caf::strong_actor_ptr>(proxy_for(self, from));
  target->second->enqueue(source, caf::make_message_id(), std::move(inner.message), self->context());
  return true;
}

std::string bridge_state::encode_outgoing(caf::local_actor* self, const outgoing_message& out,
                                          std::string& problem) {
  try {
    net::routed envelope{out.to, endpoint_of(self, out.sender), codec_->encode(out.content)};
    return codec_->encode(envelope);
  } catch (const std::exception& e) {
    problem = "cannot send " + to_string(out.content) + " to " + out.to + ": " + e.what();
    return {};
  }
}

void bridge_state::proxy_down(const std::string& endpoint, const std::string& reason) {
  auto it = proxies_.find(endpoint);
  if (it == proxies_.end()) return;
  caf::anon_send(it->second, proxy_quit{reason});
}

void bridge_state::process_lost(const std::string& process, const std::string& reason) {
  // Detached at once: a message from a process that comes back under the same name gets a new
  // proxy, never one that is about to end with the old process's death.
  for (auto it = proxies_.begin(); it != proxies_.end();) {
    if (net::process_of(it->first) != process) {
      ++it;
      continue;
    }
    caf::anon_send(it->second, proxy_quit{reason});
    it = proxies_.erase(it);
  }
}

std::vector<net::endpoint_down> bridge_state::on_down(const caf::down_msg& msg, const std::string& reason) {
  if (auto p = proxy_names_.find(msg.source); p != proxy_names_.end()) {
    // Its endpoint may already have a newer proxy (process_lost detached this one).
    if (auto q = proxies_.find(p->second); q != proxies_.end() && q->second.address() == msg.source)
      proxies_.erase(q);
    proxy_names_.erase(p);
  }
  if (all_proxies_.erase(msg.source) != 0) return stop_waiting_for(msg.source);
  auto e = export_names_.find(msg.source);
  if (e == export_names_.end()) return {};
  pending_down pending{net::endpoint_down{e->second, reason}, {}};
  exports_.erase(e->second);
  export_names_.erase(e);
  if (all_proxies_.empty()) return {pending.down};
  const auto token = ++next_token_;
  for (const auto& [address, proxy] : all_proxies_) {
    pending.waiting.insert(address);
    caf::anon_send(proxy, proxy_flush{token});
  }
  pending_downs_.emplace(token, std::move(pending));
  return {};
}

std::vector<net::endpoint_down> bridge_state::on_flushed(const proxy_flushed& f, const caf::actor_addr& proxy) {
  auto it = pending_downs_.find(f.token);
  if (it == pending_downs_.end()) return {};
  it->second.waiting.erase(proxy);
  if (!it->second.waiting.empty()) return {};
  auto down = std::move(it->second.down);
  pending_downs_.erase(it);
  return {down};
}

void bridge_state::add_proxy(caf::local_actor* self, const caf::actor& proxy) {
  if (all_proxies_.emplace(proxy.address(), proxy).second) self->monitor(proxy);
}

std::vector<net::endpoint_down> bridge_state::stop_waiting_for(const caf::actor_addr& proxy) {
  std::vector<net::endpoint_down> ready;
  for (auto it = pending_downs_.begin(); it != pending_downs_.end();) {
    it->second.waiting.erase(proxy);
    if (it->second.waiting.empty()) {
      ready.push_back(std::move(it->second.down));
      it = pending_downs_.erase(it);
    } else {
      ++it;
    }
  }
  return ready;
}

}  // namespace cohort::actors
