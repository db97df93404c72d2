// CachingAllocator: Note [Caching allocator policy] in caching_allocator.h.
#include "ringflow/kernels/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <tuple>

namespace ringflow {

// A piece of a segment. A block is in one of three states: handed out (allocated), waiting
// for events of other streams (pending_events > 0), or free in its pool. Blocks of one
// segment form an address-ordered list (prev/next), so a freed block can merge with free
// neighbours; a block with neither is a whole segment.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;  // bytes
  StreamHandle stream = nullptr;
  uint64_t pool_id = 0;  // 0: the general cache; else a private pool's (a whole segment's)
  bool small = false;    // which pool
  bool allocated = false;
  int pending_events = 0;
  std::vector<StreamHandle> stream_uses;  // other streams that used it (record_stream)
  Block* prev = nullptr;
  Block* next = nullptr;

  bool is_free() const { return !allocated && pending_events == 0; }
};

bool CachingAllocator::BySizeOnStream::operator()(const Block* a, const Block* b) const {
  const auto key = [](const Block* x) {
    return std::make_tuple(x->pool_id, reinterpret_cast<uintptr_t>(x->stream), x->size,
                           reinterpret_cast<uintptr_t>(x->ptr));
  };
  return key(a) < key(b);
}

CachingAllocator::CachingAllocator(RawDeviceMemory& raw, std::string device)
    : raw_(raw), device_(std::move(device)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  try {
    process_events(/*wait=*/true);
  } catch (...) {  // the device is going away; its memory with it
  }
  std::set<Block*> blocks(small_.begin(), small_.end());
  blocks.insert(large_.begin(), large_.end());
  for (const auto& [ptr, block] : allocated_) blocks.insert(block);
  for (const auto& [event, block] : pending_) blocks.insert(block);
  for (Block* b : blocks) delete b;
  for (const auto& [base, bytes] : segments_) {
    try {
      raw_.free(base);
    } catch (...) {
    }
  }
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes < kRound) return kRound;
  return (nbytes + kRound - 1) / kRound * kRound;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void* CachingAllocator::allocate(size_t nbytes, StreamHandle stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  // Beyond this the rounding would overflow; no device has that much memory anyway.
  if (nbytes > std::numeric_limits<size_t>::max() / 2) {
    ++stats_.out_of_memory;
    throw_out_of_memory(nbytes, nbytes, nbytes);
  }
  const size_t rounded = round_size(nbytes);
  Pool& pool = pool_for(rounded);
  const auto open = open_pools_.find(stream);
  const uint64_t pool_id = open == open_pools_.end() ? 0 : open->second;
  process_events(/*wait=*/false);
  Block* block = take_cached(pool, rounded, stream, pool_id);
  if (!block) block = take_new_segment(pool, rounded, stream, pool_id);
  if (!block) {
    // Out of device memory: cached segments (and blocks waiting only for other streams)
    // may hold enough. Free them and try again, once.
    ++stats_.cache_flushes;
    process_events(/*wait=*/true);
    release_free_segments();
    block = take_cached(pool, rounded, stream, pool_id);  // freed by the events, in a segment in use
    if (!block) block = take_new_segment(pool, rounded, stream, pool_id);
  }
  if (!block) {
    ++stats_.out_of_memory;
    throw_out_of_memory(nbytes, rounded, segment_size(rounded));
  }
  return hand_out(block, pool, rounded);
}

// The smallest free block of the pool on `stream` (and of private pool `pool_id`) that holds
// `rounded` bytes.
CachingAllocator::Block* CachingAllocator::take_cached(Pool& pool, size_t rounded, StreamHandle stream,
                                                       uint64_t pool_id) {
  Block key;
  key.stream = stream;
  key.pool_id = pool_id;
  key.size = rounded;
  const auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream || (*it)->pool_id != pool_id) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::take_new_segment(Pool& pool, size_t rounded, StreamHandle stream,
                                                            uint64_t pool_id) {
  const size_t bytes = segment_size(rounded);
  void* base = raw_.allocate(bytes);
  if (!base) return nullptr;
  segments_.emplace(base, bytes);
  stats_.reserved += bytes;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.raw_allocations;
  Block* block = new Block;
  block->ptr = static_cast<char*>(base);
  block->size = bytes;
  block->stream = stream;
  block->pool_id = pool_id;
  block->small = &pool == &small_;
  return block;
}

// Splits off what the request does not need (when worth keeping as a block) and marks
// the block allocated.
void* CachingAllocator::hand_out(Block* block, Pool& pool, size_t rounded) {
  const size_t rest = block->size - rounded;
  const bool split = block->small ? rest >= kRound : rest > kSmallRequest;
  if (split) {
    Block* tail = new Block;
    tail->ptr = block->ptr + rounded;
    tail->size = rest;
    tail->stream = block->stream;
    tail->pool_id = block->pool_id;
    tail->small = block->small;
    tail->prev = block;
    tail->next = block->next;
    if (block->next) block->next->prev = tail;
    block->next = tail;
    block->size = rounded;
    pool.insert(tail);
  }
  block->allocated = true;
  allocated_.emplace(block->ptr, block);
  stats_.allocated += block->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.allocations;
  return block->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  Block* block = find_allocated(ptr, "free");
  allocated_.erase(ptr);
  block->allocated = false;
  stats_.allocated -= block->size;
  if (block->stream_uses.empty()) {
    return_to_pool(block);
    return;
  }
  // Reused only after the work queued so far on every other stream that used it. The
  // extra count held across the loop keeps the block out of the pools for good if
  // recording an event throws: leaking it is safe, reusing memory that a stream may still
  // be using is not.
  ++block->pending_events;
  for (StreamHandle s : block->stream_uses) {
    pending_.emplace_back(raw_.record_event(s), block);
    ++block->pending_events;
  }
  --block->pending_events;
  block->stream_uses.clear();
}

// Merges a block that just became free with its free neighbours, then caches it.
void CachingAllocator::return_to_pool(Block* block) {
  Pool& pool = block->small ? small_ : large_;
  if (Block* prev = block->prev; prev && prev->is_free()) {
    pool.erase(prev);  // before its size (part of its key) changes
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next && next->is_free()) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

// Caches the blocks whose events have all completed; with `wait`, waits for every event.
void CachingAllocator::process_events(bool wait) {
  for (size_t i = 0; i < pending_.size();) {
    const auto [event, block] = pending_[i];
    if (wait) {
      raw_.synchronize_event(event);
    } else if (!raw_.event_completed(event)) {
      ++i;
      continue;
    }
    raw_.destroy_event(event);
    pending_[i] = pending_.back();  // order does not matter
    pending_.pop_back();
    if (--block->pending_events == 0) return_to_pool(block);
  }
}

// Gives back every segment that is one free block, except a private pool's (its graph
// replays into it).
void CachingAllocator::release_free_segments() {
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev || block->next || block->pool_id != 0) {
        ++it;
        continue;
      }
      raw_.free(block->ptr);
      const auto segment = segments_.find(block->ptr);
      stats_.reserved -= segment->second;
      segments_.erase(segment);
      ++stats_.raw_frees;
      it = pool->erase(it);
      delete block;
    }
  }
}

uint64_t CachingAllocator::begin_private_pool(StreamHandle stream) {
  std::lock_guard lock(mutex_);
  if (open_pools_.count(stream))
    throw std::logic_error(device_ + ": a private memory pool is open for this stream already (one capture at a time)");
  open_pools_[stream] = ++last_pool_id_;
  return last_pool_id_;
}

void CachingAllocator::end_private_pool(StreamHandle stream) {
  std::lock_guard lock(mutex_);
  open_pools_.erase(stream);
}

// Every block of the pool's segments: re-keyed into the general cache (a free one), or
// marked to go there when freed.
void CachingAllocator::release_private_pool(uint64_t id) {
  if (id == 0) return;
  std::lock_guard lock(mutex_);
  for (auto it = open_pools_.begin(); it != open_pools_.end();)
    it = it->second == id ? open_pools_.erase(it) : std::next(it);
  for (Pool* pool : {&small_, &large_}) {
    std::vector<Block*> moved;
    for (auto it = pool->begin(); it != pool->end();) {
      if ((*it)->pool_id == id) {
        moved.push_back(*it);
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
    for (Block* b : moved) {
      b->pool_id = 0;
      pool->insert(b);
    }
  }
  for (const auto& [ptr, block] : allocated_)
    if (block->pool_id == id) block->pool_id = 0;
  for (const auto& [event, block] : pending_)
    if (block->pool_id == id) block->pool_id = 0;
}

size_t CachingAllocator::private_pool_bytes(uint64_t id) const {
  std::lock_guard lock(mutex_);
  size_t bytes = 0;
  const auto count = [&](const Block* b) {
    if (b->pool_id == id && id != 0) bytes += b->size;
  };
  for (const Pool* pool : {&small_, &large_})
    for (const Block* b : *pool) count(b);
  for (const auto& [ptr, block] : allocated_) count(block);
  for (const auto& [event, block] : pending_) count(block);
  return bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  process_events(/*wait=*/true);
  release_free_segments();
}

bool CachingAllocator::owns(const void* ptr) const {
  std::lock_guard lock(mutex_);
  return allocated_.count(ptr) != 0;
}

void CachingAllocator::record_stream(void* ptr, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  Block* block = find_allocated(ptr, "record_stream");
  if (stream == block->stream) return;  // ordered with its own stream already
  for (StreamHandle s : block->stream_uses)
    if (s == stream) return;
  block->stream_uses.push_back(stream);
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

CachingAllocator::Block* CachingAllocator::find_allocated(const void* ptr, const char* what) const {
  const auto it = allocated_.find(ptr);
  if (it != allocated_.end()) return it->second;
  std::ostringstream msg;
  msg << what << "(" << ptr << "): not a block handed out by the caching allocator of "
      << device_ << " (freed already, or from another allocator)";
  throw std::invalid_argument(msg.str());
}

void CachingAllocator::throw_out_of_memory(size_t nbytes, size_t rounded, size_t segment) {
  const CachingAllocatorStats& s = stats_;
  std::ostringstream msg;
  msg << device_ << ": out of memory: cannot allocate " << format_bytes(nbytes) << " ("
      << nbytes << " bytes";
  if (rounded != nbytes) msg << ", " << rounded << " rounded";
  msg << ", a new segment of " << segment << " bytes), not even after emptying the cache; "
      << "allocated " << format_bytes(s.allocated) << ", reserved " << format_bytes(s.reserved)
      << " (" << format_bytes(s.reserved - s.allocated) << " of it cached), peak allocated "
      << format_bytes(s.peak_allocated) << ", " << s.raw_allocations << " raw allocations";
  if (const std::string device = raw_.describe(); !device.empty()) msg << "; " << device;
  throw OutOfMemoryError(msg.str());
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  }
  return text;
}

}  // namespace ringflow
