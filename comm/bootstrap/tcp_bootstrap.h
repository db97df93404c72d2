// TcpBootstrap: the Bootstrap over TCP, through a rendezvous at MASTER_ADDR:MASTER_PORT:
// either rank 0 listens there and every other rank connects to it, or (torchrun's agent
// store) a PyTorch TCPStore holds that address and rank 0, listening on a port of its own,
// publishes its address in the store for the others. So ranks started by any launcher
// (torchrun in all its forms, srun, a shell loop, two terminals) find each other without MPI.
// Blobs go through rank 0 (a star): fine for start-up's few small messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/comm/base/fd.h"
#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

namespace detail {
class WaitNotice;  // wait_notice.h, internal
}

struct TcpBootstrapOptions {
  std::string master_addr = "127.0.0.1";  // where rank 0 runs (a name or an IPv4 address)
  int master_port = 29500;                // torchrun's default
  int rank = 0;
  int size = 1;
  // Meeting at the rendezvous, and each allgather after it, must finish within this.
  std::chrono::milliseconds timeout{300000};
  // False: rank 0 listens at master_port itself. True: a PyTorch TCPStore holds
  // master_addr:master_port (torchrun's agent store, TORCHELASTIC_USE_AGENT_STORE=True), and
  // rank 0 publishes its own listening address there under store_prefix, a prefix of the
  // group's own (torchrun's run and restart) so that a restarted group never reads a dead
  // one's address.
  bool through_store = false;
  std::string store_prefix = "ringflow";
};

class TcpBootstrap final : public Bootstrap {
 public:
  // Collective: rank 0 listens on master_port (every interface), or on a port of its own that
  // it publishes through the store, and waits for the others, which connect to it, trying
  // again until rank 0 listens. While ranks are missing, each rank says on stderr what it
  // waits for, after 5 s and then every 10 s. Throws std::runtime_error naming the address
  // and the ranks missing at the timeout, a rank that connected twice, or ranks that
  // disagree on the world size.
  explicit TcpBootstrap(const TcpBootstrapOptions& options);

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::vector<std::string> allgather(const std::string& mine) override;

 private:
  void meet_as_root();
  Fd listen(detail::WaitNotice& notice, std::string* where);
  void meet_as_peer();
  Fd connect_to_root(std::chrono::steady_clock::time_point deadline, detail::WaitNotice& notice);
  Fd connect_through_store(std::chrono::steady_clock::time_point deadline,
                           detail::WaitNotice& notice);
  std::string who() const;  // "rank 1 of 4", for messages
  [[noreturn]] void fail(const std::string& what) const;

  TcpBootstrapOptions options_;
  std::string where_;       // "the rendezvous at host:port", for errors
  std::vector<Fd> peers_;   // rank 0: peers_[q] to rank q; other ranks: peers_[0] to rank 0
  int64_t allgathers_ = 0;  // for errors: which one failed
};

}  // namespace ringflow::comm
