// Which CUDA device each rank of a group uses. NCCL needs one GPU per rank, and
// `mpiexec -n N` on one host starts N ranks there, so rank r takes its local rank (its
// position among the ranks on its host) modulo the host's device count. Pure functions
// over every rank's host name, plus the collective that gathers those names.
#pragma once

#include <string>
#include <vector>

#include "ringflow/comm/group/process_group.h"

namespace ringflow::comm {

// hosts: one name per rank. The position of `rank` among the ranks on hosts[rank] (the
// ranks are numbered in rank order, from 0), and how many ranks that host has.
int local_rank_among(const std::vector<std::string>& hosts, int rank);
int local_size_among(const std::vector<std::string>& hosts, int rank);

// local_rank % device_count. Throws std::invalid_argument for device_count < 1 or a
// negative local rank.
int device_for_local_rank(int local_rank, int device_count);

// ids: what identifies the GPU of each rank (e.g. "host/PCI bus id"); empty for a rank
// without one. Empty when no two ranks share a GPU; otherwise names the first two that do:
// "ranks 0 and 2 both use <id>".
std::string shared_devices(const std::vector<std::string>& ids);

// This process's host name (gethostname).
std::string host_name();

// Every rank's `mine`, in rank order: a collective over `pg` (CPU tensors; every rank
// calls it), waited for with `timeout`. Throws CommError when it fails or times out.
std::vector<std::string> allgather_strings(ProcessGroup& pg, const std::string& mine,
                                           Timeout timeout);

}  // namespace ringflow::comm
