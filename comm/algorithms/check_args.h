// Internal to comm/ (not installed): the argument checks every allreduce algorithm makes.
#pragma once

#include "ringflow/comm/base/reduce.h"
#include "ringflow/comm/transport/transport.h"
#include <stdexcept>

namespace ringflow::comm::detail {

// Throws std::invalid_argument naming `algorithm` for a negative count, a null pointer
// with a non-zero count, a root outside the group.
void check_args(const char* algorithm, const Transport& t, Buffer buf, int root = 0);

}  // namespace ringflow::comm::detail
