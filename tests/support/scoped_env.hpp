// An environment variable set (or unset) for a scope, and what was there before put back after
// it: the old value, or the variable's absence. Tests that need a variable for a case, or for a
// part of one, hold one; the variable is restored however the scope ends.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace cohort::test {

class scoped_env {
 public:
  // `value` null: the variable is unset for the scope.
  scoped_env(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value != nullptr)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }
  scoped_env(std::string name, const std::string& value) : scoped_env(std::move(name), value.c_str()) {}
  ~scoped_env() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace cohort::test
