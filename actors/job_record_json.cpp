// JSON form of job records (see job_record_json.hpp).
#include "actors/job_record_json.hpp"

#include <stdexcept>

namespace cohort::actors {

using nlohmann::json;

job_state parse_job_state(const std::string& text) {
  for (auto s : {job_state::pending, job_state::running, job_state::restarting,
                 job_state::succeeded, job_state::failed, job_state::stopped})
    if (text == to_string(s)) return s;
  throw std::invalid_argument("unknown job state \"" + text + "\"");
}

json to_json(const job_record& r) {
  json failures = json::array();
  for (const auto& f : r.failures) {
    json one{{"attempt", f.attempt}, {"rank", f.rank}, {"node", f.node},
             {"reason", f.reason}, {"kind", to_string(f.kind)}};
    if (f.hung) {
      one["hung"] = true;
      one["last_step"] = f.last_step;
    }
    if (f.pid != 0) one["pid"] = f.pid;
    if (!f.report.empty()) one["report"] = f.report;
    failures.push_back(std::move(one));
  }
  return json{{"id", r.id},
              {"name", r.name},
              {"state", to_string(r.state)},
              {"reason", r.reason},
              {"attempts", r.attempts},
              {"failures", failures},
              {"trainer_node", r.trainer_node},
              {"rank_nodes", r.rank_nodes},
              {"step", r.step},
              {"total_steps", r.total_steps},
              {"loss", r.loss},
              {"checkpoint_step", r.checkpoint_step},
              {"held_before_step", r.held_before_step},
              {"rank_gpus", r.rank_gpus},
              {"preemptions", r.preemptions}};
}

json to_json(const node_info& n) {
  return json{{"name", n.name},
              {"address", n.address},
              {"resources", n.resources},
              {"gpus", n.resources.count("GPU") != 0 ? n.resources.at("GPU") : 0.0},
              {"accelerator_type", n.accelerator_type},
              {"gpu_memory_bytes", n.gpu_memory_bytes},
              {"gpu_ids", n.gpu_ids},
              {"gpu_note", n.gpu_note},
              {"drain_state", n.drain_state}};
}

job_record job_record_from_json(const json& j) {
  job_record r;
  try {
    r.id = j.at("id").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.state = parse_job_state(j.at("state").get<std::string>());
    r.reason = j.at("reason").get<std::string>();
    r.attempts = j.at("attempts").get<std::int32_t>();
    for (const auto& f : j.at("failures"))  // records of older heads lack kind and what follows
      r.failures.push_back(failure_cause{
          f.at("attempt").get<std::int32_t>(), f.at("rank").get<std::int32_t>(),
          f.at("node").get<std::string>(), f.at("reason").get<std::string>(),
          failure_kind_from_string(f.value("kind", std::string())), f.value("hung", false),
          f.value("pid", std::int64_t{0}), f.value("last_step", std::int64_t{0}),
          f.value("report", std::string())});
    r.trainer_node = j.at("trainer_node").get<std::string>();
    r.rank_nodes = j.at("rank_nodes").get<std::vector<std::string>>();
    r.step = j.at("step").get<std::int64_t>();
    r.total_steps = j.at("total_steps").get<std::int64_t>();
    r.loss = j.contains("loss") && j["loss"].is_number() ? j["loss"].get<double>() : 0.0;
    r.checkpoint_step = j.value("checkpoint_step", std::int64_t{0});
    r.held_before_step = j.value("held_before_step", std::int64_t{0});
    r.preemptions = j.value("preemptions", std::int32_t{0});
    if (j.contains("rank_gpus"))  // records of older heads have none
      r.rank_gpus = j.at("rank_gpus").get<std::vector<std::vector<std::int32_t>>>();
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("job record: ") + e.what());
  }
  return r;
}

}  // namespace cohort::actors
