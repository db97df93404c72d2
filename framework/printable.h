// Text read from a file made fit for an error message: control characters and bytes that are
// not valid UTF-8 become \xNN, so that a corrupt or hostile file cannot garble a terminal or
// a log with what it holds. Valid UTF-8 (a path with accents) and newlines pass unchanged.
#pragma once

#include <string>
#include <string_view>

namespace ringflow {

std::string printable(std::string_view text);

}  // namespace ringflow
