// Errors ringflow throws: std::invalid_argument for bad input a caller can fix (shapes,
// dtypes, arguments), std::runtime_error for failures of the machine or a library.
// RF_CHECK builds the message only when the check fails.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ringflow {

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace ringflow

#define RF_CHECK(cond, ...)                                               \
  do {                                                                    \
    if (!(cond)) throw std::invalid_argument(::ringflow::cat(__VA_ARGS__)); \
  } while (0)
