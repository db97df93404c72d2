// A Transport through shared memory, for the ranks of one node: see Note [shared-memory
// transport] in shm_transport.cpp. Each ordered pair of ranks (a -> b) has a channel, a
// FIFO of `slots` slots of `slot_bytes` in a's segment, filled by a and drained by b; a
// message goes as pieces of up to slot_bytes, in order. The receiver reads each piece where
// it lies, so sendrecv_reduce reduces straight from shared memory (one pass, no receive
// buffer), and every copy is one user-space memcpy into or out of a slot in cache: no
// kernel call, no page pinning.
//
// Made collectively through a Bootstrap, which carries only the set-up (which ranks share
// a node, the names of the segments): create() returns nullptr on every rank, with the
// reason, unless every rank is on this node and each could map every segment. Destroying it is local (no collective): it unmaps the segments, and
// the kernel frees them once every rank has. Nothing a peer does later can write into the
// caller's buffers, only into the segments.
//
// Threading: calls from one thread at a time. Waiting: spins for 20 us, then sleeps on a
// futex that the peer wakes when it moves a piece (no CPU while nothing comes; Note
// [shared-memory transport], "Waiting"). With a deadline (set_deadline; the process group sets its collective's), a
// wait past it throws std::runtime_error naming the rank waited for, and the transport is
// then unusable (its channels stop part-way through a message): every later call throws.
// A message of another length than expected throws as well. A peer that exits (killed,
// crashed) is noticed while waiting for it, within kLivenessPeriod (comm/base/process.h):
// the wait throws naming its rank and process id instead of lasting until the deadline;
// and a rank whose wait failed marks its segment, so that the ranks waiting for it give up
// at once too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/comm/base/mapping.h"
#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/transport/transport.h"

namespace ringflow::comm {

struct ShmTransportOptions {
  size_t slot_bytes = size_t{256} << 10;  // per slot, rounded up to 64 bytes
  int slots = 8;                          // per channel
};

class ShmTransport final : public Transport {
 public:
  // Collective over the bootstrap's ranks. nullptr (and *why_not, when given) where the ranks are not all
  // on this node or shared memory cannot be had. A segment holds size() channels; for
  // large groups slot_bytes shrinks so that a segment stays within 64 MiB.
  static std::unique_ptr<ShmTransport> create(Bootstrap& bootstrap, ShmTransportOptions options = {},
                                              std::string* why_not = nullptr);
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  int slots() const { return slots_; }
  void set_deadline(Deadline deadline) override { deadline_ = deadline; }

  void send(const void* data, size_t bytes, int peer) override;
  void recv(void* data, size_t bytes, int peer) override;
  void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from) override;
  void sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                       int64_t count, DType dtype, ReduceOp op, int from) override;
  void sendrecv_streaming(const void* send_data, size_t send_bytes, int to, void* recv_data,
                          size_t recv_bytes, int from) override;

 private:
  // How received pieces land: copied, copied with non-temporal stores, or reduced in.
  struct Landing {
    bool streaming = false;
    bool reduce = false;
    DType dtype = DType::f32;  // reduce only
    ReduceOp op = ReduceOp::sum;
  };
  ShmTransport(int rank, int size, size_t slot_bytes, int slots, std::vector<Mapping> segments,
               std::vector<int> pids);
  // Throws (and breaks the transport) when a peer this rank waits for gave up, or (with
  // liveness) has exited.
  void check_peers(int to, int from, const char* call, bool liveness);
  // Breaks the transport (why), tells the peers (the segment's failed word), throws message.
  // dead: the rank whose exit caused it, or -1.
  [[noreturn]] void fail(const std::string& why, const std::string& message, int dead = -1);
  // Moves one message each way (to < 0: none sent; from < 0: none received), interleaving
  // the pieces of both so that neither end waits for the other's whole message.
  void exchange(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from, Landing landing, const char* call);
  unsigned char* channel(int writer, int reader) const;
  // Tells `peer` that this rank moved a piece it may wait for (its doorbell).
  void ring(int peer);
  // Sleeps on this rank's doorbell until a peer rings or `until`, unless can_move() already.
  void sleep_until_rung(const std::function<bool()>& can_move,
                        std::chrono::steady_clock::time_point until);

  int rank_ = 0, size_ = 1;
  size_t slot_bytes_ = 0;
  int slots_ = 0;
  size_t channel_bytes_ = 0;
  std::vector<Mapping> segments_;  // every rank's segment, mapped here
  std::vector<int> pids_;           // every rank's process, to tell a dead peer from a slow one
  Deadline deadline_ = Deadline::max();
  std::string broken_;  // why the transport is unusable; empty while usable
};

}  // namespace ringflow::comm
