// The table and JSON of `submit plan` (see plan_output.hpp).
#include "tools/plan_output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

namespace cohort::tools {

namespace {

// A rank's host RAM: rank 0 also stages the export.
double rank_host_bytes(const actors::memory_plan& m, std::size_t rank) {
  return m.host_bytes + (rank == 0 ? m.rank0_extra_host_bytes : 0);
}

// Rows of cells, columns left-aligned and two spaces apart, each row indented by `indent`.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows,
                 const std::string& indent) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line = indent;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

// DeepSpeed's rule of thumb for a rank's host RAM under ZeRO-3 with CPU offload: 18 bytes per
// parameter over the ranks (fp32 master and moments, fp32 gradient, a 16-bit copy).
double deepspeed_offload_rule_bytes(const actors::memory_plan& m, std::size_t ranks) {
  return ranks == 0 ? 0 : 18.0 * static_cast<double>(m.parameters) / static_cast<double>(ranks);
}

}  // namespace

std::string format_bytes(double bytes) {
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  char buffer[32];
  if (std::abs(bytes) < gib)
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", bytes / (1024.0 * 1024.0));
  else
    std::snprintf(buffer, sizeof buffer, "%.1f GiB", bytes / gib);
  return buffer;
}

void print_plan(std::ostream& out, const std::string& job_name,
                const core::resources::placement& plan, const actors::memory_plan& memory) {
  // The nodes in the order their first rank appears, with their ranks.
  std::vector<std::string> nodes;
  std::map<std::string, std::vector<std::size_t>> ranks_of;
  for (std::size_t i = 0; i < plan.rank_nodes.size(); ++i) {
    if (!ranks_of.count(plan.rank_nodes[i])) nodes.push_back(plan.rank_nodes[i]);
    ranks_of[plan.rank_nodes[i]].push_back(i);
  }
  out << "job " << job_name << ": " << plan.rank_nodes.size()
      << (plan.rank_nodes.size() == 1 ? " rank" : " ranks") << " on " << nodes.size()
      << (nodes.size() == 1 ? " node" : " nodes") << ", trainer on " << plan.trainer_node << "\n\n";
  std::vector<std::vector<std::string>> node_rows{{"NODE", "RANKS"}};
  for (const auto& n : nodes) {
    std::string list;
    for (auto r : ranks_of[n]) list += (list.empty() ? "" : ",") + std::to_string(r);
    node_rows.push_back({n, list});
  }
  print_table(out, node_rows, "  ");
  out << "\n";
  std::vector<std::vector<std::string>> rank_rows;
  if (memory.known) rank_rows.push_back({"RANK", "NODE", "GPU MEMORY", "HOST RAM"});
  else rank_rows.push_back({"RANK", "NODE"});
  for (std::size_t i = 0; i < plan.rank_nodes.size(); ++i) {
    if (memory.known)
      rank_rows.push_back({std::to_string(i), plan.rank_nodes[i],
                           memory.device_bytes > 0 ? format_bytes(memory.device_bytes) : "-",
                           format_bytes(rank_host_bytes(memory, i))});
    else
      rank_rows.push_back({std::to_string(i), plan.rank_nodes[i]});
  }
  print_table(out, rank_rows, "  ");
  if (!memory.known) return;
  out << "\nmemory per rank (" << memory.setting << ", " << memory.parameters << " parameters):\n";
  std::vector<std::vector<std::string>> item_rows{{"ITEM", "SIZE", "WHERE"}};
  for (const auto& i : memory.items) item_rows.push_back({i.name, format_bytes(i.bytes), i.where});
  print_table(out, item_rows, "  ");
  out << "  total: GPU " << format_bytes(memory.device_bytes) << "; host "
      << format_bytes(memory.host_bytes) << " (steady " << format_bytes(memory.steady_host_bytes)
      << ", load peak " << format_bytes(memory.load_peak_host_bytes) << "); rank 0 exports with "
      << format_bytes(memory.rank0_extra_host_bytes) << " more\n";
  out << "  for comparison, DeepSpeed's rule of thumb for ZeRO-3 with CPU offload (18 bytes x "
      << memory.parameters << " parameters / " << plan.rank_nodes.size() << " ranks): host "
      << format_bytes(deepspeed_offload_rule_bytes(memory, plan.rank_nodes.size())) << " per rank\n";
}

nlohmann::json plan_json(const core::resources::placement& plan, const actors::memory_plan& memory) {
  auto out = nlohmann::json::parse(core::resources::plan_json_text(plan));
  if (!memory.known) return out;
  nlohmann::json items = nlohmann::json::array();
  for (const auto& i : memory.items)
    items.push_back({{"name", i.name}, {"bytes", i.bytes}, {"where", i.where}});
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.rank_nodes.size(); ++i)
    ranks.push_back({{"rank", i}, {"node", plan.rank_nodes[i]}, {"device_bytes", memory.device_bytes},
                     {"host_bytes", rank_host_bytes(memory, i)}});
  out["memory"] = {{"parameters", memory.parameters},
                   {"setting", memory.setting},
                   {"per_rank", {{"device_bytes", memory.device_bytes}, {"host_bytes", memory.host_bytes},
                                 {"steady_host_bytes", memory.steady_host_bytes},
                                 {"load_peak_host_bytes", memory.load_peak_host_bytes},
                                 {"activation_bytes", memory.activation_bytes}, {"items", items}}},
                   {"cuda_context_bytes", memory.cuda_context_bytes},
                   {"rank0_extra_host_bytes", memory.rank0_extra_host_bytes},
                   {"deepspeed_offload_rule_host_bytes", deepspeed_offload_rule_bytes(memory, plan.rank_nodes.size())},
                   {"ranks", ranks}};
  return out;
}

}  // namespace cohort::tools
