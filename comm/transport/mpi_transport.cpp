// Messages longer than kMaxMessage (1 GiB, well under MPI's int count) are cut into
// pieces of kMaxMessage bytes; MPI's non-overtaking rule on one (communicator, peer, tag)
// keeps them in order. A sendrecv whose two sides need different numbers of pieces posts
// all of them non-blocking, so neither end waits for the other's piece count.
// Without a deadline, single-piece calls go straight to MPI_Send / MPI_Recv / MPI_Sendrecv.
#include "ringflow/comm/transport/mpi_transport.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/comm/base/backoff.h"
#include "ringflow/comm/base/process.h"
#include "ringflow/comm/base/mpi_error.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

constexpr size_t kMaxMessage = size_t{1} << 30;  // bytes

size_t pieces(size_t bytes) { return bytes == 0 ? 1 : (bytes + kMaxMessage - 1) / kMaxMessage; }
int piece_bytes(size_t bytes, size_t k) {
  return static_cast<int>(std::min(kMaxMessage, bytes - std::min(bytes, k * kMaxMessage)));
}

void check_count(const MPI_Status& status, int expected, int peer, int rank) {
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  if (got != expected) {
    throw std::runtime_error(cat("MpiTransport: rank ", rank, " expected a message of ",
                                 expected, " bytes from rank ", peer, ", got ", got,
                                 " (the ranks disagree on the collective's size)"));
  }
}

}  // namespace

#define RF_MPI_CALL(call, peer)                                                          \
  do {                                                                                   \
    const int rf_code_ = (call);                                                         \
    if (rf_code_ != MPI_SUCCESS) {                                                       \
      throw std::runtime_error(cat(__FILE__, ":", __LINE__, ": ", #call, " with peer ", \
                                   peer, " failed on rank ", rank_, ": ",               \
                                   detail::mpi_error_text(rf_code_)));                  \
    }                                                                                    \
  } while (0)

MpiTransport::MpiTransport(MPI_Comm comm, int tag, Deadline deadline)
    : comm_(comm), tag_(tag), deadline_(deadline) {
  RF_CHECK(comm != MPI_COMM_NULL, "MpiTransport: null communicator");
  RF_MPI_CALL(MPI_Comm_rank(comm_, &rank_), -1);
  RF_MPI_CALL(MPI_Comm_size(comm_, &size_), -1);
}

void MpiTransport::send(const void* data, size_t bytes, int peer) {
  sendrecv(data, bytes, peer, nullptr, 0, -1);
}

void MpiTransport::recv(void* data, size_t bytes, int peer) {
  sendrecv(nullptr, 0, -1, data, bytes, peer);
}

// to < 0: receive only; from < 0: send only.
void MpiTransport::sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                            size_t recv_bytes, int from) {
  const bool blocking = deadline_ == Deadline::max();
  if (blocking && send_bytes <= kMaxMessage && recv_bytes <= kMaxMessage) {
    MPI_Status status;
    if (from < 0) {
      RF_MPI_CALL(MPI_Send(send_data, static_cast<int>(send_bytes), MPI_BYTE, to, tag_, comm_), to);
    } else if (to < 0) {
      RF_MPI_CALL(MPI_Recv(recv_data, static_cast<int>(recv_bytes), MPI_BYTE, from, tag_, comm_,
                           &status),
                  from);
      check_count(status, static_cast<int>(recv_bytes), from, rank_);
    } else {
      RF_MPI_CALL(MPI_Sendrecv(send_data, static_cast<int>(send_bytes), MPI_BYTE, to, tag_,
                               recv_data, static_cast<int>(recv_bytes), MPI_BYTE, from, tag_,
                               comm_, &status),
                  to);
      check_count(status, static_cast<int>(recv_bytes), from, rank_);
    }
    return;
  }
  const char* call = from < 0 ? "send" : to < 0 ? "recv" : "sendrecv";
  const auto* out = static_cast<const char*>(send_data);
  auto* in = static_cast<char*>(recv_data);
  const size_t recv_pieces = from >= 0 ? pieces(recv_bytes) : 0;
  const size_t send_pieces = to >= 0 ? pieces(send_bytes) : 0;
  const size_t n = recv_pieces + send_pieces;
  std::vector<MPI_Request> requests(n, MPI_REQUEST_NULL);
  std::vector<MPI_Status> statuses(n);
  std::vector<int> peers(n, to);
  for (size_t k = 0; k < recv_pieces; ++k) {
    peers[k] = from;
    RF_MPI_CALL(MPI_Irecv(in + k * kMaxMessage, piece_bytes(recv_bytes, k), MPI_BYTE, from, tag_,
                          comm_, &requests[k]),
                from);
  }
  for (size_t k = 0; k < send_pieces; ++k) {
    RF_MPI_CALL(MPI_Isend(out + k * kMaxMessage, piece_bytes(send_bytes, k), MPI_BYTE, to, tag_,
                          comm_, &requests[recv_pieces + k]),
                to);
  }
  complete(static_cast<int>(n), requests.data(), statuses.data(), peers.data(), call);
  for (size_t k = 0; k < recv_pieces; ++k) {
    check_count(statuses[k], piece_bytes(recv_bytes, k), from, rank_);
  }
}

// statuses[i] is filled for requests[i] (as MPI_Waitall does).
void MpiTransport::complete(int n, MPI_Request* requests, MPI_Status* statuses,
                            const int* peers, const char* call) {
  if (deadline_ == Deadline::max()) {
    RF_MPI_CALL(MPI_Waitall(n, requests, statuses), peers[0]);
    return;
  }
  std::vector<int> indices(n);
  std::vector<MPI_Status> done_statuses(n);
  // A segment of the ring arrives within microseconds to a millisecond.
  Backoff backoff(1000, waiters());
  auto last_look = std::chrono::steady_clock::now();
  for (int remaining = n; remaining > 0;) {
    int done = 0;
    RF_MPI_CALL(MPI_Testsome(n, requests, &done, indices.data(), done_statuses.data()), peers[0]);
    if (done != MPI_UNDEFINED) {
      for (int i = 0; i < done; ++i) statuses[indices[i]] = done_statuses[i];
      remaining -= done;
      if (remaining == 0) break;
    }
    if (std::chrono::steady_clock::now() >= deadline_) {
      std::string waiting;
      for (int k = 0; k < n; ++k) {
        if (requests[k] == MPI_REQUEST_NULL) continue;
        const std::string item = cat("rank ", peers[k]);
        if (waiting.find(item) == std::string::npos) {
          waiting += cat(waiting.empty() ? "" : ", ", item);
        }
      }
      throw std::runtime_error(cat("MpiTransport ", call, " on rank ", rank_,
                                   " timed out waiting for ", waiting));
    }
    if (const auto now = std::chrono::steady_clock::now();
        dead_peers_ && now - last_look >= kLivenessPeriod) {
      last_look = now;
      const std::string dead = dead_peers_();
      if (!dead.empty()) {
        throw std::runtime_error(cat("MpiTransport ", call, " on rank ", rank_, ": ", dead,
                                     " while this rank waited"));
      }
    }
    backoff.pause();
  }
}

}  // namespace ringflow::comm
