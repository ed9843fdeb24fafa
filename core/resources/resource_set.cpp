// Resource sets: quantities by name (CPU, GPU, memory, custom tags) (see resource_set.hpp).
#include "core/resources/resource_set.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace cohort::core::resources {

double quantity_tolerance(double a, double b) {
  return 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

resource_set::resource_set(const config::resource_quantities& quantities) {
  for (const auto& [name, value] : quantities) {
    if (!std::isfinite(value) || value < 0) {
      throw resource_error("resource " + name + " has quantity " + format_quantity(value) +
                           "; quantities must be finite and >= 0");
    }
    set(name, value);
  }
}

void resource_set::set(const std::string& name, double value) {
  if (std::fabs(value) <= quantity_tolerance(value, 0)) {
    quantities_.erase(name);
  } else {
    quantities_[name] = value;
  }
}

double resource_set::get(const std::string& name) const {
  const auto it = quantities_.find(name);
  return it == quantities_.end() ? 0.0 : it->second;
}

bool resource_set::fits_in(const resource_set& available) const {
  for (const auto& [name, need] : quantities_) {
    const double have = available.get(name);
    if (need > have + quantity_tolerance(need, have)) return false;
  }
  return true;
}

resource_set& resource_set::operator+=(const resource_set& other) {
  for (const auto& [name, value] : other.quantities_) set(name, get(name) + value);
  return *this;
}

resource_set& resource_set::operator-=(const resource_set& other) {
  for (const auto& [name, value] : other.quantities_) {
    const double have = get(name);
    if (value > have + quantity_tolerance(value, have)) {
      throw resource_error("cannot take " + name + " " + format_quantity(value) + " from " +
                           to_string() + ": only " + format_quantity(have) + " there");
    }
    set(name, std::max(0.0, have - value));
  }
  return *this;
}

resource_set resource_set::scaled(double factor) const {
  resource_set out;
  for (const auto& [name, value] : quantities_) out.set(name, value * factor);
  return out;
}

std::int64_t resource_set::copies_in(const resource_set& available, std::int64_t cap) const {
  std::int64_t copies = cap;
  for (const auto& [name, need] : quantities_) {
    const double have = available.get(name);
    const double estimate = std::floor((have + quantity_tolerance(have, need)) / need);
    copies = std::min<std::int64_t>(copies, static_cast<std::int64_t>(std::max(0.0, estimate)));
  }
  // The division above may be off by one at the tolerance edge; settle it with fits_in.
  while (copies > 0 && !scaled(static_cast<double>(copies)).fits_in(available)) --copies;
  while (copies < cap && scaled(static_cast<double>(copies + 1)).fits_in(available)) ++copies;
  return copies;
}

std::string resource_set::to_string() const {
  std::string out = "{";
  for (const auto& [name, value] : quantities_) {
    out += (out.size() > 1 ? ", " : "") + name + ": " + format_quantity(value);
  }
  return out + "}";
}

resource_set operator+(resource_set a, const resource_set& b) { return a += b; }
resource_set operator-(resource_set a, const resource_set& b) { return a -= b; }

bool operator==(const resource_set& a, const resource_set& b) {
  const auto covered = [](const resource_set& x, const resource_set& y) {
    for (const auto& [name, value] : x.quantities()) {
      if (std::fabs(value - y.get(name)) > quantity_tolerance(value, y.get(name))) return false;
    }
    return true;
  };
  return covered(a, b) && covered(b, a);
}

bool operator!=(const resource_set& a, const resource_set& b) { return !(a == b); }

std::vector<shortfall> shortfalls(const resource_set& need, const resource_set& available) {
  std::vector<shortfall> out;
  for (const auto& [name, value] : need.quantities()) {
    const double have = available.get(name);
    if (value > have + quantity_tolerance(value, have)) out.push_back({name, value, have});
  }
  return out;
}

std::string describe(const std::vector<shortfall>& missing) {
  std::string out;
  for (const auto& s : missing) {
    out += (out.empty() ? "" : ", ") + s.resource + " " + format_quantity(s.missing()) + " (needs " +
           format_quantity(s.needed) + ", has " + format_quantity(s.available) + ")";
  }
  return out;
}

std::string format_quantity(double value) {
  std::ostringstream out;
  if (std::fabs(value) < 1e15 && value == std::floor(value)) {
    out << static_cast<std::int64_t>(value);
  } else {
    out.precision(6);
    out << value;
  }
  return out.str();
}

}  // namespace cohort::core::resources
