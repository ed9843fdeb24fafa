// Resource sets: quantities by name (CPU, GPU, memory in bytes, custom tags such as large_cpu_mem),
// fractional, compared with a small tolerance so 10 x 0.1 GPU fits in 1 GPU. Plain values.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/job_spec.hpp"

namespace cohort::core::resources {

// A resource operation that cannot be done (over-reserving, releasing more than was reserved).
class resource_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Two quantities closer than this are equal: 1e-9 relative to the larger, at least 1e-9 absolute.
double quantity_tolerance(double a, double b);

class resource_set {
 public:
  resource_set() = default;
  // Throws resource_error for a negative or non-finite quantity. Zero quantities are dropped.
  explicit resource_set(const config::resource_quantities& quantities);

  double get(const std::string& name) const;
  const config::resource_quantities& quantities() const { return quantities_; }
  bool empty() const { return quantities_.empty(); }

  // True when every quantity here is at most the one in available (within tolerance).
  bool fits_in(const resource_set& available) const;
  resource_set& operator+=(const resource_set& other);
  // Throws resource_error naming the resource when a quantity would go below zero.
  resource_set& operator-=(const resource_set& other);
  // Every quantity times factor (>= 0).
  resource_set scaled(double factor) const;
  // How many copies of this set fit in available, at most cap (cap when this set is empty).
  std::int64_t copies_in(const resource_set& available, std::int64_t cap) const;

  // "{CPU: 4, GPU: 0.5, large_cpu_mem: 0.01}"
  std::string to_string() const;

 private:
  void set(const std::string& name, double value);  // drops values within tolerance of zero
  config::resource_quantities quantities_;
};

resource_set operator+(resource_set a, const resource_set& b);
resource_set operator-(resource_set a, const resource_set& b);
// Equal within tolerance, resource by resource.
bool operator==(const resource_set& a, const resource_set& b);
bool operator!=(const resource_set& a, const resource_set& b);

// One resource that need lacks in available.
struct shortfall {
  std::string resource;
  double needed = 0;
  double available = 0;
  double missing() const { return needed - available; }
};
// Every resource where need exceeds available, by name.
std::vector<shortfall> shortfalls(const resource_set& need, const resource_set& available);
// "GPU 1 (needs 1, has 0), CPU 2 (needs 8, has 6)"
std::string describe(const std::vector<shortfall>& missing);
// A quantity as text: integers without decimals, fractions with up to 6 significant digits.
std::string format_quantity(double value);

}  // namespace cohort::core::resources
