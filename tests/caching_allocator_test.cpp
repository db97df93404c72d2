// The caching policy of the CUDA allocator (kernels/caching_allocator.h), driven by a fake
// device on the host: size classes, splitting and merging, reuse on a stream, no reuse
// across streams before their events complete, statistics, empty_cache, the retry and
// message when the device runs out of memory, and CUDA graphs' private pools. Needs no GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ringflow/kernels/caching_allocator.h"

using namespace ringflow;

namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

// Streams are opaque handles to the allocator; any distinct values do.
StreamHandle stream(int id) { return reinterpret_cast<StreamHandle>(static_cast<uintptr_t>(id)); }
const StreamHandle kA = stream(1);
const StreamHandle kB = stream(2);

// A device with `capacity` bytes whose memory is the host's (malloc'ed, never touched),
// and whose events complete when the test says so (complete(stream)) or when waited for.
struct FakeDevice : RawDeviceMemory {
  struct Event {
    StreamHandle stream;
    bool done = false;
  };

  explicit FakeDevice(size_t capacity_bytes) : capacity(capacity_bytes) {}
  ~FakeDevice() override {
    for (auto& [ptr, bytes] : segments) std::free(ptr);
  }

  void* allocate(size_t nbytes) override {
    ++allocate_calls;
    if (used + nbytes > capacity) return nullptr;
    void* p = std::malloc(nbytes);
    REQUIRE(p != nullptr);
    segments[p] = nbytes;
    used += nbytes;
    return p;
  }
  void free(void* ptr) override {
    const auto it = segments.find(ptr);
    REQUIRE(it != segments.end());
    used -= it->second;
    segments.erase(it);
    std::free(ptr);
  }
  EventHandle record_event(StreamHandle s) override {
    ++events_recorded;
    live_events.push_back(new Event{s});
    return live_events.back();
  }
  bool event_completed(EventHandle e) override { return static_cast<Event*>(e)->done; }
  void synchronize_event(EventHandle e) override {
    ++synchronizations;
    static_cast<Event*>(e)->done = true;
  }
  void destroy_event(EventHandle e) override {
    ++events_destroyed;
    live_events.erase(std::remove(live_events.begin(), live_events.end(), e), live_events.end());
    delete static_cast<Event*>(e);
  }
  std::string describe() override { return "the fake device has " + std::to_string(capacity) + " bytes"; }

  // Completes every event recorded on stream s so far (the work queued there has run).
  void complete(StreamHandle s) {
    for (EventHandle e : live_events)
      if (static_cast<Event*>(e)->stream == s) static_cast<Event*>(e)->done = true;
  }

  size_t capacity;
  size_t used = 0;
  std::map<void*, size_t> segments;
  std::vector<EventHandle> live_events;
  int allocate_calls = 0, events_recorded = 0, events_destroyed = 0, synchronizations = 0;
};

char* as_bytes(void* p) { return static_cast<char*>(p); }

}  // namespace

TEST_CASE("sizes round to 512 bytes; small requests take 2 MiB segments, large 20 MiB or their own") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(MiB) == MiB);
  CHECK(CachingAllocator::round_size(MiB + 1) == MiB + 512);
  CHECK(CachingAllocator::segment_size(512) == 2 * MiB);
  CHECK(CachingAllocator::segment_size(MiB) == 2 * MiB);
  CHECK(CachingAllocator::segment_size(MiB + 512) == 20 * MiB);
  CHECK(CachingAllocator::segment_size(10 * MiB - 512) == 20 * MiB);
  CHECK(CachingAllocator::segment_size(10 * MiB) == 10 * MiB);
  CHECK(CachingAllocator::segment_size(11 * MiB + 512) == 12 * MiB);
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(3 * MiB / 2) == "1.50 MiB");
}

TEST_CASE("small blocks are cut from one segment and reused on their stream without a raw allocation") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  CHECK(alloc.allocate(0, kA) == nullptr);

  void* a = alloc.allocate(1000, kA);
  void* b = alloc.allocate(1000, kA);
  CHECK(as_bytes(b) == as_bytes(a) + 1024);  // the rest of a's segment, split off
  CachingAllocatorStats s = alloc.stats();
  CHECK(s.raw_allocations == 1);
  CHECK(s.allocated == 2048);
  CHECK(s.reserved == 2 * MiB);
  CHECK(s.allocations == 2);

  alloc.free(a);
  CHECK(alloc.stats().allocated == 1024);
  void* again = alloc.allocate(700, kA);  // 1024 after rounding: a's block is the best fit
  CHECK(again == a);
  CHECK(alloc.stats().raw_allocations == 1);
  CHECK(dev.allocate_calls == 1);
  alloc.free(again);
  alloc.free(b);
}

TEST_CASE("freed neighbours merge; a segment of free blocks is one block and empty_cache gives it back") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* a = alloc.allocate(4 * KiB, kA);
  void* b = alloc.allocate(4 * KiB, kA);
  void* c = alloc.allocate(4 * KiB, kA);
  alloc.free(a);
  alloc.free(b);
  // a and b merged into one 8 KiB block: the best fit for 8 KiB, ahead of the segment's tail.
  void* ab = alloc.allocate(8 * KiB, kA);
  CHECK(ab == a);
  alloc.free(ab);

  alloc.empty_cache();  // c still holds the segment
  CHECK(alloc.stats().reserved == 2 * MiB);
  CHECK(dev.segments.size() == 1);

  alloc.free(c);  // c merges with both sides: the segment is one free block again
  alloc.empty_cache();
  const CachingAllocatorStats s = alloc.stats();
  CHECK(s.reserved == 0);
  CHECK(s.allocated == 0);
  CHECK(s.raw_frees == 1);
  CHECK(dev.segments.empty());
}

TEST_CASE("large blocks split only when more than 1 MiB is left over") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* a = alloc.allocate(3 * MiB, kA);  // a 20 MiB segment
  void* b = alloc.allocate(3 * MiB, kA);
  CHECK(as_bytes(b) == as_bytes(a) + 3 * MiB);
  void* c = alloc.allocate(12 * MiB, kA);  // from the 14 MiB left, 2 MiB left over
  CHECK(as_bytes(c) == as_bytes(b) + 3 * MiB);
  CHECK(alloc.stats().raw_allocations == 1);
  void* d = alloc.allocate(MiB + MiB / 2, kA);  // the last 2 MiB, whole: 0.5 MiB is no block
  CHECK(as_bytes(d) == as_bytes(c) + 12 * MiB);
  CHECK(alloc.stats().allocated == 20 * MiB);
  CHECK(alloc.stats().raw_allocations == 1);

  void* big = alloc.allocate(25 * MiB + 1, kA);  // its own segment, rounded to 2 MiB
  CHECK(alloc.stats().reserved == 20 * MiB + 26 * MiB);
  CHECK(dev.segments.at(big) == 26 * MiB);
  // Small requests never come from the large pool, even with large blocks free.
  alloc.free(big);
  void* small = alloc.allocate(4 * KiB, kA);
  CHECK(alloc.stats().raw_allocations == 3);
  CHECK(dev.segments.at(small) == 2 * MiB);
  for (void* p : {a, b, c, d, small}) alloc.free(p);
}

TEST_CASE("blocks are not shared between streams") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* a = alloc.allocate(5 * MiB, kA);
  alloc.free(a);
  void* on_b = alloc.allocate(5 * MiB, kB);  // a's segment belongs to stream A
  CHECK(on_b != a);
  CHECK(alloc.stats().raw_allocations == 2);
  void* on_a = alloc.allocate(5 * MiB, kA);
  CHECK(on_a == a);
  CHECK(alloc.stats().raw_allocations == 2);
  alloc.free(on_a);
  alloc.free(on_b);
}

TEST_CASE("record_stream: a freed block waits for the other stream's work before reuse") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* p = alloc.allocate(1000, kA);
  alloc.record_stream(p, kA);  // its own stream: nothing to wait for
  alloc.record_stream(p, kB);
  alloc.record_stream(p, kB);  // once is enough
  alloc.free(p);
  CHECK(dev.events_recorded == 1);
  CHECK(alloc.stats().allocated == 0);  // the program no longer holds it

  void* q = alloc.allocate(1000, kA);  // stream B may still be reading p
  CHECK(q != p);
  void* r = alloc.allocate(1000, kA);
  CHECK(r != p);

  dev.complete(kB);
  void* s = alloc.allocate(1000, kA);  // B's work is done: p is the best fit again
  CHECK(s == p);
  CHECK(dev.events_destroyed == 1);
  CHECK(alloc.stats().raw_allocations == 1);

  // A block used on B and freed is returned by empty_cache after waiting for the event.
  alloc.record_stream(s, kB);
  for (void* x : {q, r, s}) alloc.free(x);
  alloc.empty_cache();
  CHECK(dev.synchronizations == 1);
  CHECK(dev.events_destroyed == 2);
  CHECK(alloc.stats().reserved == 0);
  CHECK(dev.segments.empty());
}

// Note [Private pools for CUDA graphs].
TEST_CASE("private pools: a capture's blocks come from segments of its own and go back there") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* outside = alloc.allocate(4 * KiB, kA);  // the general cache's segment, with room left
  alloc.free(outside);
  const uint64_t id = alloc.begin_private_pool(kA);
  CHECK(id > 0);
  CHECK_THROWS_WITH_AS(alloc.begin_private_pool(kA), doctest::Contains("one capture at a time"), std::logic_error);
  void* t1 = alloc.allocate(4 * KiB, kA);  // not the general cache's free block
  CHECK(t1 != outside);
  CHECK(alloc.stats().raw_allocations == 2);
  alloc.free(t1);  // freed during the capture: the capture's later requests reuse it
  void* t2 = alloc.allocate(4 * KiB, kA);
  CHECK(t2 == t1);
  void* other_stream = alloc.allocate(4 * KiB, kB);  // other streams: the general cache
  CHECK(alloc.private_pool_bytes(id) == 2 * MiB);
  alloc.end_private_pool(kA);
  // After the capture the pool's free blocks are the graph's: nobody else gets them.
  void* after = alloc.allocate(4 * KiB, kA);
  CHECK(after == outside);
  alloc.free(t2);
  void* again = alloc.allocate(4 * KiB, kA);
  CHECK(again != t2);
  CHECK(as_bytes(again) == as_bytes(after) + 4 * KiB);
  // empty_cache keeps the pool's segment (the graph replays into it) ...
  alloc.free(after);
  alloc.free(again);
  alloc.free(other_stream);
  alloc.empty_cache();
  CHECK(alloc.private_pool_bytes(id) == 2 * MiB);
  CHECK(dev.segments.size() == 1);
  // ... until the pool is released: then it is an ordinary cached segment.
  alloc.release_private_pool(id);
  CHECK(alloc.private_pool_bytes(id) == 0);
  void* reused = alloc.allocate(4 * KiB, kA);
  CHECK(reused == t1);
  alloc.free(reused);
  alloc.empty_cache();
  CHECK(dev.segments.empty());
}

TEST_CASE("private pools: a block handed out in the capture and freed after release joins the cache") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  const uint64_t id = alloc.begin_private_pool(kA);
  void* kept = alloc.allocate(3 * MiB, kA);  // large pool: its own 20 MiB segment
  alloc.end_private_pool(kA);
  alloc.release_private_pool(id);
  alloc.free(kept);
  CHECK(alloc.allocate(3 * MiB, kA) == kept);
  CHECK(alloc.stats().raw_allocations == 1);
}

TEST_CASE("statistics: allocated, reserved and their peaks, reset to the current values") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* a = alloc.allocate(MiB, kA);
  void* b = alloc.allocate(12 * MiB, kA);
  alloc.free(b);
  CachingAllocatorStats s = alloc.stats();
  CHECK(s.allocated == MiB);
  CHECK(s.peak_allocated == 13 * MiB);
  CHECK(s.reserved == 2 * MiB + 12 * MiB);  // b's segment stays cached
  CHECK(s.peak_reserved == 14 * MiB);
  CHECK(s.allocations == 2);
  alloc.reset_peak_stats();
  alloc.empty_cache();
  s = alloc.stats();
  CHECK(s.peak_allocated == MiB);
  CHECK(s.peak_reserved == 14 * MiB);  // the peak of since the reset
  CHECK(s.reserved == 2 * MiB);
  CHECK(s.raw_frees == 1);
  alloc.free(a);
}

TEST_CASE("out of memory: the cache is emptied and the allocation retried") {
  FakeDevice dev(40 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* a = alloc.allocate(3 * MiB, kA);  // 20 MiB segment
  alloc.record_stream(a, kB);
  alloc.free(a);  // cached, and waiting for stream B
  void* big = alloc.allocate(30 * MiB, kA);  // 20 + 30 > 40: fails, flush, retry succeeds
  REQUIRE(big != nullptr);
  const CachingAllocatorStats s = alloc.stats();
  CHECK(s.cache_flushes == 1);
  CHECK(s.raw_frees == 1);
  CHECK(s.raw_allocations == 2);
  CHECK(s.out_of_memory == 0);
  CHECK(s.reserved == 30 * MiB);
  CHECK(dev.synchronizations == 1);  // the flush waited for B before freeing a's segment
  alloc.free(big);
}

TEST_CASE("out of memory even after emptying the cache: the message names the request and the stats") {
  FakeDevice dev(40 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* held = alloc.allocate(30 * MiB, kA);
  void* cached = alloc.allocate(4 * KiB, kA);  // a 2 MiB segment, freed below: cached
  alloc.free(cached);
  try {
    alloc.allocate(20 * MiB, kA);
    FAIL("allocating 20 MiB of 40 with 30 held did not throw");
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    MESSAGE(msg);
    CHECK(msg.find("cuda:fake: out of memory") != std::string::npos);
    CHECK(msg.find("20.00 MiB (20971520 bytes") != std::string::npos);
    CHECK(msg.find("allocated 30.00 MiB") != std::string::npos);
    CHECK(msg.find("reserved 30.00 MiB") != std::string::npos);  // the cached 2 MiB went back
    CHECK(msg.find("the fake device has 41943040 bytes") != std::string::npos);
  }
  const CachingAllocatorStats s = alloc.stats();
  CHECK(s.out_of_memory == 1);
  CHECK(s.cache_flushes == 1);
  CHECK(s.allocated == 30 * MiB);
  // Still usable afterwards. (8 MiB would not fit: it takes a 20 MiB segment.)
  void* fits = alloc.allocate(10 * MiB, kA);
  CHECK(fits != nullptr);
  alloc.free(fits);
  alloc.free(held);
  CHECK_THROWS_AS(alloc.allocate(size_t{1} << 63, kA), OutOfMemoryError);
}

TEST_CASE("free and record_stream reject pointers the allocator did not hand out") {
  FakeDevice dev(1024 * MiB);
  CachingAllocator alloc(dev, "cuda:fake");
  void* p = alloc.allocate(100, kA);
  CHECK(alloc.owns(p));
  int local = 0;
  CHECK_FALSE(alloc.owns(&local));
  CHECK_THROWS_WITH_AS(alloc.free(&local), doctest::Contains("not a block handed out"),
                       std::invalid_argument);
  CHECK_THROWS_AS(alloc.free(as_bytes(p) + 512), std::invalid_argument);  // inside a block
  alloc.free(p);
  CHECK_FALSE(alloc.owns(p));
  CHECK_THROWS_AS(alloc.free(p), std::invalid_argument);  // twice
  CHECK_THROWS_AS(alloc.record_stream(p, kB), std::invalid_argument);
  alloc.free(nullptr);
}

TEST_CASE("destroying the allocator gives every segment back") {
  FakeDevice dev(1024 * MiB);
  {
    CachingAllocator alloc(dev, "cuda:fake");
    alloc.allocate(100, kA);  // still held
    void* p = alloc.allocate(30 * MiB, kA);
    alloc.record_stream(p, kB);
    alloc.free(p);  // pending on B
    CHECK(dev.segments.size() == 2);
  }
  CHECK(dev.segments.empty());
  CHECK(dev.events_destroyed == dev.events_recorded);
}

// Random sizes across both pools and two streams: live blocks never overlap and lie inside
// the segments, the statistics add up, and once all is freed every segment merges back and
// empty_cache returns it. Two threads at once, then one checking the invariants.
TEST_CASE("random traffic keeps blocks disjoint and every segment whole in the end") {
  FakeDevice dev(size_t{4} << 30);
  CachingAllocator alloc(dev, "cuda:fake");
  const auto sizes = [](std::mt19937& rng) {
    switch (rng() % 3) {
      case 0: return size_t{1} + rng() % (4 * KiB);
      case 1: return size_t{1} + rng() % (2 * MiB);
      default: return size_t{1} + rng() % (24 * MiB);
    }
  };

  const auto churn = [&](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<void*> live;
    for (int i = 0; i < 3000; ++i) {
      if (!live.empty() && rng() % 2) {
        const size_t k = rng() % live.size();
        alloc.free(live[k]);
        live[k] = live.back();
        live.pop_back();
      } else {
        live.push_back(alloc.allocate(sizes(rng), rng() % 2 ? kA : kB));
      }
    }
    for (void* p : live) alloc.free(p);
  };
  std::thread other(churn, 1);
  churn(2);
  other.join();
  CHECK(alloc.stats().allocated == 0);

  std::mt19937 rng(3);
  std::map<char*, size_t> live;  // address -> requested bytes
  for (int i = 0; i < 1500; ++i) {
    if (!live.empty() && rng() % 5 < 2) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      alloc.free(it->first);
      live.erase(it);
      continue;
    }
    const size_t n = sizes(rng);
    char* p = as_bytes(alloc.allocate(n, rng() % 2 ? kA : kB));
    const auto next = live.lower_bound(p);
    if (next != live.end()) REQUIRE(p + n <= next->first);
    if (next != live.begin()) REQUIRE(std::prev(next)->first + std::prev(next)->second <= p);
    const auto seg = std::prev(dev.segments.upper_bound(p));
    REQUIRE(p + n <= as_bytes(seg->first) + seg->second);
    live.emplace(p, n);
  }
  size_t in_segments = 0;
  for (const auto& [ptr, bytes] : dev.segments) in_segments += bytes;
  CHECK(alloc.stats().reserved == in_segments);
  size_t rounded = 0;
  for (const auto& [ptr, bytes] : live) rounded += CachingAllocator::round_size(bytes);
  CHECK(alloc.stats().allocated >= rounded);  // large blocks may keep an unsplit tail
  for (const auto& [ptr, bytes] : live) alloc.free(ptr);
  alloc.empty_cache();
  CHECK(alloc.stats().allocated == 0);
  CHECK(alloc.stats().reserved == 0);
  CHECK(dev.segments.empty());
  CHECK(alloc.stats().raw_frees == alloc.stats().raw_allocations);
}
