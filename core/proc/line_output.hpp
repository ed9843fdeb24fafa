// Daemon log lines written whole: each `<<` of a chain is a write of its own, so a line written as a
// chain can be split by another thread writing at the same moment; say_whole_line writes the line
// and its newline in one write, flushed.
#pragma once

#include <ostream>
#include <string>

namespace cohort::core::proc {

inline void say_whole_line(std::ostream& out, const std::string& line) { out << (line + "\n") << std::flush; }

}  // namespace cohort::core::proc
