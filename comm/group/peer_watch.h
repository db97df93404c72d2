// PeerWatch: whether the other ranks of a group still run, and how far they came. Each rank
// holds a TCP connection to every other (a liveness link) that carries nothing but short
// notes: "where are you?", the answer (the last collective this rank began), "I gave up"
// and a goodbye. A link that closes without either means its process exited (TCP keepalive
// fails it within seconds when the host vanishes); a rank that does not answer is stopped
// or hung.
// A thread per watch reads the links and answers for this rank. Groups ask while waiting in
// a library that never hears of a dead peer (MPI's own collectives), and after a
// collective failed, to name the rank whose exit or absence made it fail rather than the
// neighbour that was waiting for it too (Note [liveness links] in peer_watch.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ringflow/comm/base/fd.h"
#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

// How long a rank that lost a collective waits for the others to say where they are: a
// running rank's watch thread answers within milliseconds, so silence this long means the
// rank is stopped (SIGSTOP, a debugger) or its whole process hangs (swapping, a stuck driver).
constexpr std::chrono::milliseconds kAnswerPatience{2000};
// How long a rank that gave up waits for the others' goodbyes (PeerWatch::wait_for_goodbyes):
// long enough for them to reach their next collective, fail, ask and report.
constexpr std::chrono::milliseconds kGoodbyeGrace{10000};

class PeerWatch {
 public:
  // Collective over the bootstrap's ranks. The links are made on `interface` (as
  // TcpTransportOptions::interface) within setup_timeout; where they cannot be made, the
  // ranks of this node are still looked up by process id, and unwatched() says why the
  // others are not watched.
  explicit PeerWatch(Bootstrap& bootstrap, const std::string& interface = "",
                     std::chrono::milliseconds setup_timeout = std::chrono::seconds(30));
  // Says goodbye (unless it did already) and stops the thread.
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // "rank 2 (process 4711) has exited" for each rank whose process is gone ("rank 2
  // (process 4711 on node-b) has exited" for another node's; "... is unreachable: <why>"
  // where its link failed, e.g. keepalive timed out), joined by "; "; empty while all run.
  // Thread-safe.
  std::string dead_peers();
  // Why the ranks of other nodes are not watched; empty when they are (or there are none).
  const std::string& unwatched() const { return unwatched_; }
  // Whether a rank's process was found gone (what was found is kept).
  bool saw_death() const;

  // The communication thread began collective number `seq` (the group's sequence): what
  // this rank answers when a peer asks where it is.
  void arrive(int64_t seq) { arrived_.store(seq, std::memory_order_relaxed); }
  // This rank gave up on the group (it broke): its peers stop asking it and do not take
  // its exit for a death. Said once. Thread-safe.
  void give_up();
  // This rank is done with the group (its failure, if any, was reported): what
  // wait_for_goodbyes() waits for. Said once; gives up too. Thread-safe.
  void say_goodbye();
  // After collective `seq` failed: asks each rank still in the group where it is, waits up
  // to `patience` for the answers (or the links' ends), and names the ranks that never
  // began it: "rank 2 (process 4711) did not arrive: it does not answer (stopped or hung)",
  // "...: its last collective is #24", "...: it left the group after collective #24",
  // joined by "; "; empty when every rank asked began it (or none could be asked).
  // Thread-safe.
  std::string absent_from(int64_t seq, std::chrono::milliseconds patience = kAnswerPatience);
  // Waits until every other rank said goodbye, exited, or did not answer absent_from(),
  // for at most `limit`; false when some did not. Thread-safe.
  bool wait_for_goodbyes(std::chrono::milliseconds limit = kGoodbyeGrace);

 private:
  struct Peer {
    int rank = 0;
    int pid = 0;
    std::string host;   // empty on this node
    Fd link;            // invalid where the links could not be made
    std::string inbox;  // bytes of a note not yet whole
    std::string dead;   // how it ended: "has exited", "is unreachable: ..."; empty while it runs
    bool closed = false;                // the link ended (exit or failure)
    std::optional<int64_t> left_after;  // gave up (or said goodbye) after this collective
    bool goodbye = false;               // said goodbye
    std::optional<int64_t> answer;      // its last answer to "where are you?"
    bool silent = false;                // did not answer absent_from's question
  };
  struct Note;

  void listen();  // the thread: reads every link until the destructor wakes it
  void read_link(Peer& p);               // under mutex_
  void take(Peer& p, const Note& note);  // under mutex_
  void send_note(Peer& p, char kind, int64_t seq);  // under mutex_
  void tell_all(char kind);                          // under mutex_
  std::string who(const Peer& p) const;  // "rank 2 (process 4711 on node-b)"

  std::vector<Peer> peers_;  // every other rank
  std::string unwatched_;
  std::atomic<int64_t> arrived_{-1};
  mutable std::mutex mutex_;
  std::condition_variable answered_;
  bool gave_up_ = false, said_goodbye_ = false;  // under mutex_
  Fd wake_read_, wake_write_;  // the destructor wakes the thread through this pipe
  std::thread thread_;
};

}  // namespace ringflow::comm
