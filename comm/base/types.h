// Vocabulary shared by every process group and algorithm: reduce ops, allreduce
// algorithms and the options each collective takes (with defaults).
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringflow::comm {

enum class ReduceOp : uint8_t { sum, avg, max, min };

// Which allreduce implementation runs. native = the backend's own (MPI_Allreduce,
// ncclAllReduce); automatic picks by message size, world size and how the ranks share hosts;
// hierarchical: within each host to its leader, a ring among the leaders, back.
enum class Algorithm : uint8_t { automatic, native, naive, tree, recursive_doubling, ring, hierarchical };

const char* reduce_op_name(ReduceOp op);    // "sum", ...
const char* algorithm_name(Algorithm algo);  // "ring", ...
ReduceOp reduce_op_from_name(const std::string& name);    // throws naming the choices
Algorithm algorithm_from_name(const std::string& name);  // throws naming the choices

// The position of `rank` in `members` (a view over some ranks of a group: SubTransport,
// SubBootstrap); throws std::invalid_argument naming `what` when it is not among them.
int position_among(const std::vector<int>& members, int rank, const char* what);

using Timeout = std::chrono::milliseconds;
inline constexpr Timeout kDefaultTimeout = std::chrono::seconds(300);

struct CollectiveOptions {
  ReduceOp op = ReduceOp::sum;
  Algorithm algorithm = Algorithm::automatic;
  int root = 0;
  Timeout timeout = kDefaultTimeout;
};

}  // namespace ringflow::comm
