// TcpBootstrap: the Bootstrap over TCP, through a rendezvous at MASTER_ADDR:MASTER_PORT as
// torchrun's store: rank 0 listens there and every other rank connects to it, so ranks
// started by any launcher (torchrun, srun, a shell loop, two terminals) find each other
// without MPI. Blobs go through rank 0 (a star): fine for start-up's few small messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/comm/base/fd.h"
#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

struct TcpBootstrapOptions {
  std::string master_addr = "127.0.0.1";  // where rank 0 runs (a name or an IPv4 address)
  int master_port = 29500;                // torchrun's default
  int rank = 0;
  int size = 1;
  // Meeting at the rendezvous, and each allgather after it, must finish within this.
  std::chrono::milliseconds timeout{300000};
};

class TcpBootstrap final : public Bootstrap {
 public:
  // Collective: rank 0 listens on master_port (every interface) and waits for the others,
  // which connect to master_addr:master_port, retrying until rank 0 listens. Throws
  // std::runtime_error naming the address and the ranks missing at the timeout, a rank
  // that connected twice, or ranks that disagree on the world size.
  explicit TcpBootstrap(const TcpBootstrapOptions& options);

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::vector<std::string> allgather(const std::string& mine) override;

 private:
  void meet_as_root();
  void meet_as_peer();
  [[noreturn]] void fail(const std::string& what) const;

  TcpBootstrapOptions options_;
  std::string where_;       // "the rendezvous at host:port", for errors
  std::vector<Fd> peers_;   // rank 0: peers_[q] to rank q; other ranks: peers_[0] to rank 0
  int64_t allgathers_ = 0;  // for errors: which one failed
};

}  // namespace ringflow::comm
