// Local rank, device choice and the checks around them (comm/group/device_choice.h).
#include "ringflow/comm/group/device_choice.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "ringflow/framework/error.h"
#include "ringflow/framework/ops.h"

namespace ringflow::comm {

int local_rank_among(const std::vector<std::string>& hosts, int rank) {
  RF_CHECK(rank >= 0 && rank < static_cast<int>(hosts.size()), "local_rank_among: rank ", rank,
           " outside ", hosts.size(), " host names");
  return static_cast<int>(std::count(hosts.begin(), hosts.begin() + rank, hosts[rank]));
}

int local_size_among(const std::vector<std::string>& hosts, int rank) {
  RF_CHECK(rank >= 0 && rank < static_cast<int>(hosts.size()), "local_size_among: rank ", rank,
           " outside ", hosts.size(), " host names");
  return static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[rank]));
}

int device_for_local_rank(int local_rank, int device_count) {
  RF_CHECK(device_count >= 1, "device_for_local_rank: no CUDA device (device count ",
           device_count, ")");
  RF_CHECK(local_rank >= 0, "device_for_local_rank: negative local rank ", local_rank);
  return local_rank % device_count;
}

std::string shared_devices(const std::vector<std::string>& ids) {
  for (size_t a = 0; a < ids.size(); ++a) {
    if (ids[a].empty()) continue;
    for (size_t b = a + 1; b < ids.size(); ++b) {
      if (ids[b] == ids[a]) return cat("ranks ", a, " and ", b, " both use ", ids[a]);
    }
  }
  return "";
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

// Two allgathers over pg: the lengths, then the bytes padded to the longest (as i64 words:
// the process group moves tensors, and ringflow has no byte dtype).
std::vector<std::string> allgather_strings(ProcessGroup& pg, const std::string& mine,
                                           Timeout timeout) {
  CollectiveOptions o;
  o.timeout = timeout;
  const int n = pg.size();
  Tensor length = full({1}, static_cast<double>(mine.size()), DType::i64);
  Tensor lengths = zeros({n}, DType::i64);
  pg.allgather(lengths, length, o)->wait();
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  const int64_t words = (longest + 7) / 8;
  Tensor text = zeros({words}, DType::i64);
  if (!mine.empty()) std::memcpy(text.raw_data(), mine.data(), mine.size());
  Tensor all = zeros({n * words}, DType::i64);
  pg.allgather(all, text, o)->wait();
  std::vector<std::string> out(static_cast<size_t>(n));
  const char* bytes = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < n; ++r) out[r].assign(bytes + r * words * 8, static_cast<size_t>(sizes[r]));
  return out;
}

}  // namespace ringflow::comm
