// Names of reduce ops and algorithms, for flags, logs and error messages.
#include "ringflow/comm/base/types.h"

#include <algorithm>
#include <stdexcept>

namespace ringflow::comm {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
constexpr Algorithm kAlgorithms[] = {Algorithm::automatic, Algorithm::native,
                                     Algorithm::naive,     Algorithm::tree,
                                     Algorithm::recursive_doubling, Algorithm::ring,
                                     Algorithm::hierarchical};

template <class T, size_t N, class NameFn>
T from_name(const std::string& name, const T (&all)[N], NameFn name_of, const char* what) {
  std::string choices;
  for (T value : all) {
    if (name == name_of(value)) return value;
    choices += choices.empty() ? "" : ", ";
    choices += name_of(value);
  }
  throw std::invalid_argument("unknown " + std::string(what) + " '" + name +
                              "' (choices: " + choices + ")");
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

const char* algorithm_name(Algorithm algo) {
  switch (algo) {
    case Algorithm::automatic: return "auto";
    case Algorithm::native: return "native";
    case Algorithm::naive: return "naive";
    case Algorithm::tree: return "tree";
    case Algorithm::recursive_doubling: return "recursive_doubling";
    case Algorithm::ring: return "ring";
    case Algorithm::hierarchical: return "hierarchical";
  }
  return "?";
}

ReduceOp reduce_op_from_name(const std::string& name) {
  return from_name(name, kOps, reduce_op_name, "reduce op");
}

Algorithm algorithm_from_name(const std::string& name) {
  return from_name(name, kAlgorithms, algorithm_name, "allreduce algorithm");
}

int position_among(const std::vector<int>& members, int rank, const char* what) {
  const auto it = std::find(members.begin(), members.end(), rank);
  if (it == members.end())
    throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(rank) +
                                " is not among the members");
  return static_cast<int>(it - members.begin());
}

}  // namespace ringflow::comm
