// Mapping: owns a region from mmap and unmaps it once, so that a shared-memory set-up that
// fails half-way leaves nothing mapped.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <utility>

namespace ringflow::comm {

class Mapping {
 public:
  Mapping() = default;
  Mapping(void* data, size_t bytes) : data_(static_cast<unsigned char*>(data)), bytes_(bytes) {}
  ~Mapping() { reset(); }
  Mapping(Mapping&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset() {
    if (data_) munmap(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ringflow::comm
