// What every fuzz target does with libFuzzer's bytes: writes them to an anonymous in-memory
// file (memfd) and hands its /proc/self/fd path to a reader that takes paths; the reader
// must return or throw std::exception (an error naming the file), never crash, leak, read
// out of bounds or hang (AddressSanitizer and UBSan watch).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ringflow::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : fd_(::memfd_create("fuzz", 0)) {
    if (fd_ < 0) std::abort();
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~FuzzInput() { ::close(fd_); }
  FuzzInput(const FuzzInput&) = delete;
  FuzzInput& operator=(const FuzzInput&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace ringflow::fuzz
