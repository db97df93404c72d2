// Note [shared-memory transport]: why our algorithms do not talk through MPI on one node.
// MPICH 4.0.2 (ch4:ucx, UCX 1.13) moves a large message between two ranks of one node by
// rendezvous over CMA: the receiver copies the sender's pages with process_vm_readv,
// which pins and copies page by page in the kernel, at about half the speed of a
// user-space memcpy; UCX's alternatives are slower still (UCX_TLS=sysv,self: copy-in/
// copy-out through 8 KB active messages; posix), and there is no knem or xpmem (figures
// in docs/allreduce.md).
// A ring step at 2 ranks is "receive 32 MB, reduce it in", so over MPI it is two copies
// in the kernel plus a reduction, which cannot come near the memcpy bound.
//
// Here each ordered pair of ranks (a -> b) has a channel in a's segment (POSIX shared
// memory, every rank maps every segment):
//
//   [head: written (a's count of pieces published), consumed (b's count of pieces done),
//          each on its own cache line]
//   [slot 0: message_bytes, piece_bytes | slot_bytes of data] ... [slot slots-1: ...]
//
// A message goes as ceil(bytes / slot_bytes) pieces (one for 0 bytes); piece i lies in slot
// i % slots. a writes a piece into a free slot (written - consumed < slots), then publishes
// it (written + 1, release); b waits for written > consumed (acquire), copies or reduces
// the piece out of the slot, then frees it (consumed + 1, release). The counters only
// grow, so consecutive messages on a channel follow each other, in order, as MPI's do on
// one (communicator, peer, tag). sendrecv interleaves its send and receive pieces, so it
// cannot deadlock with any peer, itself included; a message longer than a channel holds
// (slots * slot_bytes) is rendezvous-like: the sender waits for the receiver to drain.
// Slots: the writer fills them with non-temporal stores, so the reader reads each piece
// from memory, not from the writer's cache. A line another core has just written reaches
// the reader by a cache-to-cache transfer, as fast as memory where the two cores share a
// cache and several times slower where they do not; on a VM the host places the virtual
// CPUs, and the ring fell to MPI_Allreduce's speed in the runs where the two cores shared
// no cache (docs/allreduce.md, "Why the sender writes around its cache").
//
// Waiting: a rank that can neither send nor receive spins for 20 us (a piece from a peer
// that is running arrives within that), then sleeps on its doorbell, a futex word in its
// own segment: a rank that publishes a piece to it, or frees a slot it writes into, adds 1
// to the doorbell and wakes it if its sleeping word is set. The sleeper sets that word,
// reads the doorbell, looks once more, and sleeps only while the doorbell still holds what
// it read, so no ring is lost (each side writes its own word before it reads the other's,
// all sequentially consistent). It wakes at least every kLivenessPeriod to look at its
// peers, and a rank that gives up rings everyone. So a waiting communication thread uses
// no CPU while its peers are slow, where polling (as MPI must) took the cores from the
// computation it overlaps with; ringing costs an atomic add per piece and a system call
// only when the peer sleeps. (Timed against the polling this replaced, in interleaved
// runs neither came out ahead: docs/allreduce.md; the CPU it saves is the point.)
#include "ringflow/comm/transport/shm_transport.h"

#include <fcntl.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <memory>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

#include "ringflow/comm/base/reduce.h"
#include "ringflow/comm/base/fd.h"
#include "ringflow/comm/base/process.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kLine = 64;
// Line 0, failed: the owner gave up. Line 1: the owner's doorbell and sleeping words.
constexpr size_t kSegmentHeadBytes = 2 * kLine;
constexpr size_t kHeadBytes = 2 * kLine;   // written, consumed
constexpr size_t kSlotHeadBytes = kLine;   // message_bytes, piece_bytes
constexpr size_t kMaxSegment = size_t{64} << 20;
constexpr size_t kMinSlot = size_t{4} << 10;
constexpr auto kSpin = std::chrono::microseconds(20);  // then the doorbell

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// memcpy with non-temporal stores: the destination's lines are not read first (no
// read-for-ownership) and do not displace the cache.
void copy_streaming(unsigned char* dst, const unsigned char* src, size_t bytes) {
#if defined(__SSE2__)
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  _mm_sfence();
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

uint64_t* written(unsigned char* channel) { return reinterpret_cast<uint64_t*>(channel); }
uint64_t* consumed(unsigned char* channel) {
  return reinterpret_cast<uint64_t*>(channel + kLine);
}
uint64_t load(uint64_t* p, std::memory_order order) { return std::atomic_ref<uint64_t>(*p).load(order); }
void store(uint64_t* p, uint64_t v) { std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release); }

// A segment's doorbell and sleeping words (Note [shared-memory transport], "Waiting").
std::atomic_ref<uint32_t> doorbell(unsigned char* segment) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(segment + kLine));
}
std::atomic_ref<uint32_t> sleeping(unsigned char* segment) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(segment + kLine + 4));
}

// Shared between processes: not FUTEX_PRIVATE_FLAG.
void futex_wait(unsigned char* segment, uint32_t seen, std::chrono::nanoseconds timeout) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{static_cast<time_t>(s.count()), static_cast<long>((timeout - s).count())};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(segment + kLine), FUTEX_WAIT, seen, &ts,
          nullptr, 0);  // woken, timed out, or the doorbell already moved: the caller looks
}

void futex_wake(unsigned char* segment) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(segment + kLine), FUTEX_WAKE, INT32_MAX,
          nullptr, nullptr, 0);
}

size_t pieces(size_t bytes, size_t slot_bytes) {
  return bytes == 0 ? 1 : (bytes + slot_bytes - 1) / slot_bytes;
}

std::string errno_text() { return std::strerror(errno); }

// Maps `name` (bytes long) read-write, or returns an empty Mapping with *error set.
Mapping map_segment(const char* name, size_t bytes, bool create, std::string* error) {
  Fd fd(create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0));
  if (!fd) {
    *error = cat("shm_open(", name, "): ", errno_text());
    return {};
  }
  if (create && ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    *error = cat("ftruncate(", name, ", ", bytes, "): ", errno_text());
    return {};
  }
  struct stat st{};
  if (!create && (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) != bytes)) {
    *error = cat("segment ", name, " is not ", bytes, " bytes long");
    return {};
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    *error = cat("mmap(", name, ", ", bytes, "): ", errno_text());
    return {};
  }
  return Mapping(p, bytes);
}

// A name no other segment on this node has: pid, a counter, and random bits.
std::string segment_name() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  const uint64_t salt = (uint64_t{device()} << 32) ^ device();
  return cat("/ringflow-shm.", getpid(), ".", counter++, ".", salt % 1000000007);
}

}  // namespace

std::unique_ptr<ShmTransport> ShmTransport::create(Bootstrap& bootstrap, ShmTransportOptions options,
                                                   std::string* why_not) {
  RF_CHECK(options.slot_bytes > 0 && options.slots > 0,
           "ShmTransport: slot_bytes and slots must be > 0");
  const int rank = bootstrap.rank(), size = bootstrap.size();
  // Only where every rank is on this node (bench/cluster's hosts do not share one,
  // although their namespaces could share /dev/shm).
  const std::vector<std::string> nodes = bootstrap.allgather(node_identity());
  if (node_ranks(nodes, rank).local_size != size) {
    if (why_not) *why_not = "the ranks are not all on one node";
    return nullptr;
  }

  size_t slot_bytes = (options.slot_bytes + kLine - 1) / kLine * kLine;
  const int slots = options.slots;
  auto segment_bytes_for = [&](size_t slot) {
    return kSegmentHeadBytes + static_cast<size_t>(size) * (kHeadBytes + slots * (kSlotHeadBytes + slot));
  };
  while (slot_bytes > kMinSlot && segment_bytes_for(slot_bytes) > kMaxSegment) slot_bytes /= 2;
  slot_bytes = std::max(kLine, slot_bytes / kLine * kLine);
  const size_t segment_bytes = segment_bytes_for(slot_bytes);

  // Each rank makes its own segment; all names go to everyone; each maps the others.
  std::string reason;
  const std::string own_name = segment_name();
  std::vector<Mapping> segments(size);
  segments[rank] = map_segment(own_name.c_str(), segment_bytes, /*create=*/true, &reason);
  const bool created = static_cast<bool>(segments[rank]);
  const std::vector<std::string> names = bootstrap.allgather(own_name);
  bool ok = created;
  for (int q = 0; q < size && ok; ++q) {
    if (q == rank) continue;
    segments[q] = map_segment(names[q].c_str(), segment_bytes, /*create=*/false, &reason);
    ok = static_cast<bool>(segments[q]);
  }
  const std::vector<std::string> outcomes = bootstrap.allgather(ok ? "" : reason);
  std::vector<int> pids(size);
  const std::vector<std::string> pid_texts = bootstrap.allgather(std::to_string(::getpid()));
  for (int q = 0; q < size; ++q) pids[q] = std::atoi(pid_texts[q].c_str());
  // Every rank has opened every segment (or given up): the names can go.
  if (created) shm_unlink(own_name.c_str());
  for (const std::string& theirs : outcomes) {
    if (theirs.empty()) continue;
    if (why_not) *why_not = ok ? "another rank could not map the shared segments: " + theirs : reason;
    return nullptr;
  }
  return std::unique_ptr<ShmTransport>(
      new ShmTransport(rank, size, slot_bytes, slots, std::move(segments), std::move(pids)));
}

ShmTransport::ShmTransport(int rank, int size, size_t slot_bytes, int slots,
                           std::vector<Mapping> segments, std::vector<int> pids)
    : rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      slots_(slots),
      channel_bytes_(kHeadBytes + slots * (kSlotHeadBytes + slot_bytes)),
      segments_(std::move(segments)),
      pids_(std::move(pids)) {}

// Peers waiting for this rank read its segment's failed word (check_peers) and give up at
// once, instead of at their deadlines: the failure spreads along the algorithm's messages.
// The failed word holds 1 + the rank whose process exited, when that is the cause (so
// that every survivor names it), else 1 + size().
void ShmTransport::fail(const std::string& why, const std::string& message, int dead) {
  broken_ = why;
  store(reinterpret_cast<uint64_t*>(segments_[rank_].data()),
        1 + static_cast<uint64_t>(dead >= 0 ? dead : size_));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) ring(peer);
  }
  throw std::runtime_error(message);
}

void ShmTransport::ring(int peer) {
  unsigned char* segment = segments_[peer].data();
  doorbell(segment).fetch_add(1);
  if (sleeping(segment).load() != 0) futex_wake(segment);
}

void ShmTransport::sleep_until_rung(const std::function<bool()>& can_move, Clock::time_point until) {
  unsigned char* own = segments_[rank_].data();
  sleeping(own).store(1);
  const uint32_t seen = doorbell(own).load();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const auto now = Clock::now();
  if (!can_move() && until > now) futex_wait(own, seen, until - now);
  sleeping(own).store(0, std::memory_order_relaxed);
}

void ShmTransport::check_peers(int to, int from, const char* call, bool liveness) {
  for (int peer : {to, from}) {
    if (peer < 0 || peer == rank_) continue;
    const uint64_t failed =
        load(reinterpret_cast<uint64_t*>(segments_[peer].data()), std::memory_order_acquire);
    if (failed != 0) {
      const int dead = failed - 1 < static_cast<uint64_t>(size_) ? static_cast<int>(failed - 1) : -1;
      const std::string cause = dead >= 0 ? cat(": rank ", dead, " (process ", pids_[dead], ") has exited")
                                          : " (its own wait failed: see its message)";
      fail(cat("rank ", peer, " gave up"),
           cat("ShmTransport ", call, " on rank ", rank_, ": rank ", peer,
               " gave up on this collective", cause), dead);
    }
    if (liveness && !process_alive(pids_[peer])) {
      const std::string why = cat("rank ", peer, " (process ", pids_[peer], ") has exited");
      fail(why, cat("ShmTransport ", call, " on rank ", rank_, ": ", why,
                    " while this rank waited for it"), peer);
    }
  }
}

ShmTransport::~ShmTransport() = default;

unsigned char* ShmTransport::channel(int writer, int reader) const {
  return segments_[writer].data() + kSegmentHeadBytes + static_cast<size_t>(reader) * channel_bytes_;
}

void ShmTransport::send(const void* data, size_t bytes, int peer) {
  exchange(data, bytes, peer, nullptr, 0, -1, {}, "send");
}

void ShmTransport::recv(void* data, size_t bytes, int peer) {
  exchange(nullptr, 0, -1, data, bytes, peer, {}, "recv");
}

void ShmTransport::sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                            size_t recv_bytes, int from) {
  exchange(send_data, send_bytes, to, recv_data, recv_bytes, from, {}, "sendrecv");
}

void ShmTransport::sendrecv_streaming(const void* send_data, size_t send_bytes, int to,
                                      void* recv_data, size_t recv_bytes, int from) {
  exchange(send_data, send_bytes, to, recv_data, recv_bytes, from, {.streaming = true},
           "sendrecv");
}

void ShmTransport::sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                                   int64_t count, DType dtype, ReduceOp op, int from) {
  RF_CHECK(count >= 0, "ShmTransport::sendrecv_reduce: negative count ", count);
  exchange(send_data, send_bytes, to, inout, static_cast<size_t>(count) * dtype_size(dtype), from,
           {.reduce = true, .dtype = dtype, .op = op}, "sendrecv_reduce");
}

void ShmTransport::exchange(const void* send_data, size_t send_bytes, int to, void* recv_data,
                            size_t recv_bytes, int from, Landing landing, const char* call) {
  if (!broken_.empty()) {
    throw std::runtime_error(cat("ShmTransport ", call, " on rank ", rank_,
                                 ": unusable since an earlier call failed: ", broken_));
  }
  RF_CHECK(to < size_ && from < size_, "ShmTransport ", call, ": peer outside the group of ",
           size_, " ranks (to ", to, ", from ", from, ")");
  const auto* out = static_cast<const unsigned char*>(send_data);
  auto* in = static_cast<unsigned char*>(recv_data);
  const size_t send_pieces = to >= 0 ? pieces(send_bytes, slot_bytes_) : 0;
  const size_t recv_pieces = from >= 0 ? pieces(recv_bytes, slot_bytes_) : 0;
  unsigned char* const out_channel = to >= 0 ? channel(rank_, to) : nullptr;
  unsigned char* const in_channel = from >= 0 ? channel(from, rank_) : nullptr;
  const size_t esize = landing.reduce ? dtype_size(landing.dtype) : 1;
  auto slot = [&](unsigned char* ch, uint64_t piece) {
    return ch + kHeadBytes + (piece % static_cast<uint64_t>(slots_)) * (kSlotHeadBytes + slot_bytes_);
  };

  size_t sent = 0, received = 0, sent_bytes = 0, received_bytes = 0;
  auto can_send = [&] {
    return sent < send_pieces &&
           load(written(out_channel), std::memory_order_relaxed) -
                   load(consumed(out_channel), std::memory_order_acquire) <
               static_cast<uint64_t>(slots_);
  };
  auto can_receive = [&] {
    return received < recv_pieces && load(written(in_channel), std::memory_order_acquire) >
                                         load(consumed(in_channel), std::memory_order_relaxed);
  };
  auto idle_since = Clock::now(), last_look = idle_since;
  bool idle = false;
  while (sent < send_pieces || received < recv_pieces) {
    bool progress = false;
    if (can_send()) {
      const uint64_t w = load(written(out_channel), std::memory_order_relaxed);
      const size_t len = std::min(slot_bytes_, send_bytes - sent_bytes);
      unsigned char* s = slot(out_channel, w);
      const uint64_t head[2] = {send_bytes, len};
      std::memcpy(s, head, sizeof head);
      // Around the writer's cache: Note [shared-memory transport], "Slots".
      if (len > 0) copy_streaming(s + kSlotHeadBytes, out + sent_bytes, len);
      store(written(out_channel), w + 1);
      ring(to);
      ++sent;
      sent_bytes += len;
      progress = true;
    }
    if (can_receive()) {
      const uint64_t c = load(consumed(in_channel), std::memory_order_relaxed);
      const unsigned char* s = slot(in_channel, c);
      uint64_t head[2];
      std::memcpy(head, s, sizeof head);
      const size_t len = std::min(slot_bytes_, recv_bytes - received_bytes);
      if (head[0] != recv_bytes || head[1] != len) {
        const std::string why = cat("rank ", rank_, " expected a message of ", recv_bytes,
                                    " bytes from rank ", from, ", got ", head[0],
                                    " (the ranks disagree on the collective's size)");
        fail(why, cat("ShmTransport ", call, ": ", why));
      }
      if (len > 0) {
        if (landing.reduce) {
          reduce_into(in + received_bytes, s + kSlotHeadBytes, static_cast<int64_t>(len / esize),
                      landing.dtype, landing.op);
        } else if (landing.streaming) {
          copy_streaming(in + received_bytes, s + kSlotHeadBytes, len);
        } else {
          std::memcpy(in + received_bytes, s + kSlotHeadBytes, len);
        }
      }
      store(consumed(in_channel), c + 1);
      ring(from);
      ++received;
      received_bytes += len;
      progress = true;
    }
    if (progress) {
      idle = false;
      continue;
    }
    // Nothing moved: spin, then sleep on the doorbell (Note [shared-memory transport]).
    const auto now = Clock::now();
    if (!idle) idle_since = now, idle = true;
    if (now >= deadline_) {
      std::string waiting;
      if (sent < send_pieces) waiting = cat("rank ", to);
      if (received < recv_pieces && !(sent < send_pieces && from == to)) {
        waiting += cat(waiting.empty() ? "" : ", ", "rank ", from);
      }
      fail(cat(call, " timed out waiting for ", waiting),
           cat("ShmTransport ", call, " on rank ", rank_, " timed out waiting for ", waiting));
    }
    const bool liveness = now - last_look >= kLivenessPeriod;
    if (liveness) last_look = now;
    check_peers(sent < send_pieces ? to : -1, received < recv_pieces ? from : -1, call, liveness);
    if (now - idle_since < kSpin) {
      cpu_relax();
    } else {
      sleep_until_rung([&] { return can_send() || can_receive(); },
                       std::min(deadline_, last_look + kLivenessPeriod));
    }
  }
}

}  // namespace ringflow::comm
