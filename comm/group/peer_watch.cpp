// Note [liveness links]: MPI (MPICH 4.0 over UCX's TCP) reports nothing when a rank of
// another node dies: the survivors wait in MPI_Testsome until the collective's timeout,
// then hang in MPI_Finalize (docs/failures.md). The kernel closes a killed process's
// sockets, so a connection that only notes travel on turns readable exactly when the
// peer's process is gone; a rank that gives up on its group first says so, so that leaving
// is never taken for dying. Keepalive probes (idle 2 s, every 1 s, 3 lost) end a
// connection whose host vanished without closing anything.
// A stopped or hung rank closes nothing. Its neighbours in a ring time out waiting for
// each other as much as for it (rank 1 waits for rank 0, which waits for the stopped rank
// 2), so the transport's "timed out waiting for rank 0" names the wrong one. A rank that
// lost a collective therefore asks every other where it is: the ranks that began it answer
// so from their watch threads, whatever their communication threads wait for, and the one
// that never began it answers with an earlier collective or, stopped, not at all.
#include "ringflow/comm/group/peer_watch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ringflow/comm/base/process.h"
#include "ringflow/comm/group/device_choice.h"
#include "ringflow/comm/transport/tcp_mesh.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {

// What travels on a link, whole or not at all (16 bytes: one send, one receive).
struct PeerWatch::Note {
  char kind = 0;  // one of the constants below
  char pad[7] = {};
  int64_t seq = 0;  // the last collective this rank began
};

namespace {

constexpr char kAsk = 'Q', kAnswer = 'A', kGaveUp = 'G', kGoodbye = 'B';

void keep_alive(int fd) {
  const int on = 1, idle = 2, interval = 1, count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// "node\npid\nhost" of one rank, through the bootstrap.
struct Identity {
  std::string node;
  int pid = 0;
  std::string host;
};

Identity parse_identity(const std::string& blob, int rank) {
  const size_t a = blob.find('\n'), b = blob.rfind('\n');
  RF_CHECK(a != std::string::npos && b > a, "PeerWatch: rank ", rank, " sent no identity");
  return {blob.substr(0, a), std::atoi(blob.c_str() + a + 1), blob.substr(b + 1)};
}

}  // namespace

PeerWatch::PeerWatch(Bootstrap& bootstrap, const std::string& interface,
                     std::chrono::milliseconds setup_timeout) {
  const std::string me = node_identity();
  const std::vector<std::string> all =
      bootstrap.allgather(cat(me, "\n", ::getpid(), "\n", host_name()));
  std::vector<bool> linked(all.size(), true);
  linked[static_cast<size_t>(bootstrap.rank())] = false;
  bool remote = false;
  for (int q = 0; q < bootstrap.size(); ++q) {
    if (q == bootstrap.rank()) continue;
    const Identity id = parse_identity(all[q], q);
    remote = remote || id.node != me;
    Peer& p = peers_.emplace_back();
    p.rank = q;
    p.pid = id.pid;
    if (id.node != me) p.host = id.host;
  }
  if (peers_.empty()) return;
  std::string why_not;
  std::optional<TcpMesh> mesh = connect_mesh(bootstrap, linked, interface, setup_timeout, &why_not);
  if (!mesh) {
    if (remote) unwatched_ = cat("ranks of other nodes are not watched: ", why_not);
    return;
  }
  for (Peer& p : peers_) {
    p.link = std::move(mesh->fds[p.rank]);
    keep_alive(p.link.get());
  }
  int pipe_fds[2];
  RF_CHECK(::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) == 0, "PeerWatch: pipe2: ", std::strerror(errno));
  wake_read_.reset(pipe_fds[0]);
  wake_write_.reset(pipe_fds[1]);
  thread_ = std::thread([this] { listen(); });
  pthread_setname_np(thread_.native_handle(), "rf_peer_watch");
}

PeerWatch::~PeerWatch() {
  say_goodbye();
  if (!thread_.joinable()) return;
  const char stop = 1;
  while (::write(wake_write_.get(), &stop, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

void PeerWatch::give_up() {
  std::lock_guard lock(mutex_);
  if (gave_up_) return;
  gave_up_ = true;
  tell_all(kGaveUp);
}

void PeerWatch::say_goodbye() {
  std::lock_guard lock(mutex_);
  if (said_goodbye_) return;
  said_goodbye_ = gave_up_ = true;
  tell_all(kGoodbye);
}

void PeerWatch::tell_all(char kind) {
  for (Peer& p : peers_) {
    if (p.link && !p.closed) send_note(p, kind, arrived_.load(std::memory_order_relaxed));
  }
}

void PeerWatch::send_note(Peer& p, char kind, int64_t seq) {
  Note note;
  note.kind = kind;
  note.seq = seq;
  // 16 bytes into an otherwise idle socket's buffer: all of it or, when the peer is gone,
  // nothing (its end is then read from the link).
  (void)::send(p.link.get(), &note, sizeof note, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void PeerWatch::listen() {
  std::vector<pollfd> fds;
  std::vector<Peer*> polled;
  for (;;) {
    fds.assign(1, pollfd{wake_read_.get(), POLLIN, 0});
    polled.clear();
    {
      std::lock_guard lock(mutex_);
      for (Peer& p : peers_) {
        if (p.closed) continue;
        fds.push_back({p.link.get(), POLLIN, 0});
        polled.push_back(&p);
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // the destructor
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i + 1].revents != 0) read_link(*polled[i]);
    }
    answered_.notify_all();
  }
}

// Everything readable: whole notes, an end of stream (the process exited) or an error
// (keepalive timed out: the host or the network is gone).
void PeerWatch::read_link(Peer& p) {
  char buffer[256];
  for (;;) {
    const ssize_t got = ::recv(p.link.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (got <= 0) {
      p.closed = true;
      if (!p.left_after) {
        p.dead = got == 0 ? "has exited"
                          : cat("is unreachable: its liveness link failed: ", std::strerror(errno));
      }
      return;
    }
    p.inbox.append(buffer, static_cast<size_t>(got));
    while (p.inbox.size() >= sizeof(Note)) {
      Note note;
      std::memcpy(&note, p.inbox.data(), sizeof note);
      p.inbox.erase(0, sizeof note);
      take(p, note);
    }
  }
}

void PeerWatch::take(Peer& p, const Note& note) {
  p.silent = false;
  switch (note.kind) {
    case kAsk: send_note(p, kAnswer, arrived_.load(std::memory_order_relaxed)); break;
    case kAnswer: p.answer = note.seq; break;
    case kGaveUp: p.left_after = note.seq; break;
    case kGoodbye:
      p.left_after = note.seq;
      p.goodbye = true;
      break;
    default:
      p.closed = true;
      p.dead = cat("is unreachable: its liveness link carried a note of kind ",
                   static_cast<int>(note.kind));
  }
}

std::string PeerWatch::who(const Peer& p) const {
  return cat("rank ", p.rank, " (process ", p.pid, p.host.empty() ? "" : cat(" on ", p.host), ")");
}

bool PeerWatch::saw_death() const {
  std::lock_guard lock(mutex_);
  return std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.dead.empty(); });
}

std::string PeerWatch::dead_peers() {
  std::lock_guard lock(mutex_);
  std::string out;
  for (Peer& p : peers_) {
    // A linked peer's end is read from its link, where a goodbye comes before it.
    if (!p.link && p.dead.empty() && p.host.empty() && !process_alive(p.pid)) p.dead = "has exited";
    if (p.dead.empty()) continue;
    out += cat(out.empty() ? "" : "; ", who(p), " ", p.dead);
  }
  return out;
}

std::string PeerWatch::absent_from(int64_t seq, std::chrono::milliseconds patience) {
  std::unique_lock lock(mutex_);
  auto asked = [](const Peer& p) { return p.link && !p.closed && !p.left_after && p.dead.empty(); };
  for (Peer& p : peers_) {
    p.answer.reset();
    if (asked(p)) send_note(p, kAsk, seq);
  }
  answered_.wait_for(lock, patience, [&] {
    return std::all_of(peers_.begin(), peers_.end(),
                       [&](const Peer& p) { return !asked(p) || p.answer; });
  });
  std::string out;
  for (Peer& p : peers_) {
    std::string why;
    if (!p.dead.empty() || !p.link) continue;  // dead_peers() names the dead
    if (p.left_after) {
      if (*p.left_after < seq) why = cat("it left the group after collective #", *p.left_after);
    } else if (!p.answer) {
      p.silent = true;
      why = cat("it does not answer (stopped or hung; asked for ", patience.count(), " ms)");
    } else if (*p.answer < seq) {
      why = *p.answer < 0 ? "it has begun no collective"
                          : cat("its last collective is #", *p.answer);
    }
    if (!why.empty()) out += cat(out.empty() ? "" : "; ", who(p), " did not arrive: ", why);
  }
  return out;
}

bool PeerWatch::wait_for_goodbyes(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return answered_.wait_for(lock, limit, [&] {
    return std::all_of(peers_.begin(), peers_.end(), [](const Peer& p) {
      return !p.link || p.closed || p.goodbye || p.silent;
    });
  });
}

}  // namespace ringflow::comm
