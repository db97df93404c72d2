// The caching policy of the CUDA allocator, in plain C++: device memory comes from a raw
// allocator (cudaMalloc under kernels/cuda/allocator.cpp, a fake in tests) in segments
// that are split into blocks, cached when freed and reused, so that a training step of
// shapes seen before makes no raw allocation. Thread-safe: one mutex per allocator.
//
// Note [Caching allocator policy] (PyTorch's CUDACachingAllocator, without its options):
// - Sizes round up to 512 bytes. Requests up to 1 MiB come from the small pool, whose
//   segments are 2 MiB; larger ones from the large pool, whose segments are 20 MiB for
//   requests under 10 MiB and the request rounded up to 2 MiB otherwise.
// - A request takes the smallest cached block of its pool and stream that fits; the
//   remainder is split off as a block of its own when it is at least 512 bytes (small
//   pool) or more than 1 MiB (large pool). A freed block merges with free neighbours of
//   its segment, so a segment whose blocks are all free is one block again.
// - Blocks belong to the stream they were allocated on: work on one stream runs in order,
//   so a block freed there may be handed out there again at once. A block used on other
//   streams too (record_stream) is reused only after an event recorded on each of those
//   streams at free time has completed.
// - When the raw allocator is out of memory, the cache is emptied (waiting for pending
//   events) and the raw allocation tried once more; if it fails again, allocate throws
//   OutOfMemoryError naming the request and the statistics.
//
// Note [Private pools for CUDA graphs] (PyTorch's graph memory pools): a captured graph
// replays into the very addresses its capture was given, temporaries included, so no other
// work may be handed that memory while the graph lives. While a private pool is open for a
// stream, that stream's requests are served from segments of the pool's own (blocks freed
// during the capture are reused by later requests of the capture: the graph replays them in
// the same order); a block of the pool, freed whenever, goes back to the pool, never to the
// general cache. Releasing the pool (the graph is gone) hands its blocks to the general
// cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ringflow {

// Opaque handles of the raw allocator: cudaStream_t and cudaEvent_t for CUDA.
using StreamHandle = void*;
using EventHandle = void*;

// What the policy needs from the device. Called with the allocator's mutex held.
class RawDeviceMemory {
 public:
  virtual ~RawDeviceMemory() = default;
  // nbytes of device memory, or null when the device is out of memory; throws on any
  // other failure.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void free(void* ptr) = 0;
  // An event that completes when the work queued on `stream` so far has.
  virtual EventHandle record_event(StreamHandle stream) = 0;
  virtual bool event_completed(EventHandle event) = 0;
  virtual void synchronize_event(EventHandle event) = 0;  // blocks until it completes
  virtual void destroy_event(EventHandle event) = 0;
  // A line on the device's memory for out-of-memory messages (e.g. "cudaMemGetInfo: ...").
  virtual std::string describe() { return {}; }
};

struct CachingAllocatorStats {
  size_t allocated = 0;        // bytes: blocks handed out now (rounded sizes)
  size_t reserved = 0;         // bytes: segments held from the raw allocator (allocated + cached)
  size_t peak_allocated = 0;   // bytes, since construction or reset_peak_stats
  size_t peak_reserved = 0;
  uint64_t allocations = 0;      // calls to allocate that returned memory
  uint64_t raw_allocations = 0;  // segments the raw allocator gave (cudaMalloc calls)
  uint64_t raw_frees = 0;        // segments given back (cudaFree calls)
  uint64_t cache_flushes = 0;    // times the raw allocator ran out and the cache was emptied
  uint64_t out_of_memory = 0;    // allocations that failed even after emptying the cache
};

class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CachingAllocator {
 public:
  // Sizes of Note [Caching allocator policy], in bytes.
  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallRequest = size_t{1} << 20;      // <= this: small pool
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeSegment = size_t{20} << 20;     // for requests < kMinLargeAlloc
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;
  static constexpr size_t kRoundLarge = size_t{2} << 20;

  // `raw` must outlive the allocator; `device` names it in messages ("cuda:0").
  CachingAllocator(RawDeviceMemory& raw, std::string device);
  // Waits for pending events and gives every segment back, including any still allocated
  // (their memory is gone with the allocator).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static size_t round_size(size_t nbytes);     // the block size a request takes
  static size_t segment_size(size_t rounded);  // the raw allocation made for it on a miss

  // nbytes (0 gives null) for use on `stream`. Throws OutOfMemoryError.
  void* allocate(size_t nbytes, StreamHandle stream);
  // Returns a block of allocate() to the cache. Throws std::invalid_argument for a pointer
  // this allocator did not hand out (null is ignored).
  void free(void* ptr);
  bool owns(const void* ptr) const;
  // The block at ptr is (also) used by work queued on `stream`: when freed it is not reused
  // before that work completes. Throws std::invalid_argument as free.
  void record_stream(void* ptr, StreamHandle stream);

  // Note [Private pools for CUDA graphs]: from now on requests on `stream` come from a new
  // private pool, until end_private_pool(stream). Returns the pool's id (> 0). Throws
  // std::logic_error when one is open for the stream already.
  uint64_t begin_private_pool(StreamHandle stream);
  void end_private_pool(StreamHandle stream);
  // The pool's blocks join the general cache (allocated ones when freed). Unknown ids are
  // ignored.
  void release_private_pool(uint64_t id);
  size_t private_pool_bytes(uint64_t id) const;  // bytes of the pool's segments

  // Gives every cached segment whose blocks are all free back to the raw allocator,
  // after waiting for the events of freed blocks still in use on other streams.
  void empty_cache();
  CachingAllocatorStats stats() const;
  void reset_peak_stats();  // peaks := current values

 private:
  struct Block;
  struct BySizeOnStream {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySizeOnStream>;

  Pool& pool_for(size_t rounded) { return rounded <= kSmallRequest ? small_ : large_; }
  Block* take_cached(Pool& pool, size_t rounded, StreamHandle stream, uint64_t pool_id);
  Block* take_new_segment(Pool& pool, size_t rounded, StreamHandle stream, uint64_t pool_id);
  void* hand_out(Block* block, Pool& pool, size_t rounded);
  void return_to_pool(Block* block);
  void process_events(bool wait);
  void release_free_segments();
  Block* find_allocated(const void* ptr, const char* what) const;
  [[noreturn]] void throw_out_of_memory(size_t nbytes, size_t rounded, size_t segment);

  RawDeviceMemory& raw_;
  const std::string device_;
  mutable std::mutex mutex_;
  Pool small_, large_;  // free blocks, by (private pool, stream, size, address)
  std::unordered_map<StreamHandle, uint64_t> open_pools_;  // stream -> private pool serving it
  uint64_t last_pool_id_ = 0;
  std::unordered_map<const void*, Block*> allocated_;   // handed out, by address
  std::vector<std::pair<EventHandle, Block*>> pending_; // freed, waiting for other streams
  std::unordered_map<void*, size_t> segments_;          // raw allocations: base -> bytes
  CachingAllocatorStats stats_;
};

// "1.50 GiB", "512 B": sizes in messages.
std::string format_bytes(size_t bytes);

}  // namespace ringflow
