#include "ringflow/comm/bootstrap/bootstrap.h"

#include <algorithm>

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <system_error>

#include "ringflow/framework/error.h"

namespace ringflow::comm {

std::string Bootstrap::broadcast(const std::string& blob, int root) {
  RF_CHECK(root >= 0 && root < size(), "Bootstrap::broadcast: root ", root,
           " outside the group of ", size(), " ranks");
  return allgather(rank() == root ? blob : std::string())[root];
}

std::string node_identity() {
  char host[HOST_NAME_MAX + 1] = {};
  gethostname(host, sizeof host);
  std::error_code error;
  const auto net = std::filesystem::read_symlink("/proc/self/ns/net", error);
  return cat(host, "/", error ? std::string("?") : net.string());
}

NodeRanks node_ranks(const std::vector<std::string>& identities, int rank) {
  RF_CHECK(rank >= 0 && rank < static_cast<int>(identities.size()), "node_ranks: rank ", rank,
           " outside the group of ", identities.size(), " ranks");
  NodeRanks r{0, 0};
  for (int q = 0; q < static_cast<int>(identities.size()); ++q) {
    if (identities[q] != identities[rank]) continue;
    if (q < rank) ++r.local_rank;
    ++r.local_size;
  }
  return r;
}

std::vector<int> host_indices(const std::vector<std::string>& identities) {
  std::vector<int> host(identities.size());
  std::vector<std::string> seen;
  for (size_t r = 0; r < identities.size(); ++r) {
    const auto it = std::find(seen.begin(), seen.end(), identities[r]);
    host[r] = static_cast<int>(it - seen.begin());
    if (it == seen.end()) seen.push_back(identities[r]);
  }
  return host;
}

}  // namespace ringflow::comm
