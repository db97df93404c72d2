// Tar archives as WebDataset shards use them: POSIX ustar members read front to back without
// an index (GNU long names and pax path records understood), and written with ustar headers
// (mode 0644, owner 0, time 0: the same files give the same bytes).
//
// A file that is not a tar, a header whose checksum fails, or an archive cut inside a member
// throws std::runtime_error naming the file, the member and the byte offset.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ringflow::data {

struct TarMember {
  std::string name;
  int64_t size = 0;         // bytes
  int64_t offset = 0;       // of its data in the file
  std::vector<uint8_t> data;  // unless TarReader::next was told to skip it
};

class TarReader {
 public:
  explicit TarReader(std::string path);
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // The next regular file (folders and other entries are passed over); false at the end of
  // the archive. Its bytes are read unless want_data(name) says no (then skipped: a seek).
  bool next(TarMember& member, const std::function<bool(const std::string&)>& want_data = nullptr);
  const std::string& path() const { return path_; }

 private:
  bool read_block(uint8_t* block, const char* what);
  void read_exactly(uint8_t* dst, int64_t n, const std::string& member);
  void skip(int64_t n, const std::string& member);
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t at_ = 0;  // bytes consumed
  int64_t size_ = 0;
};

class TarWriter {
 public:
  explicit TarWriter(std::string path);  // truncates
  ~TarWriter();                          // finish() if not yet
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // name: at most 255 bytes (split into ustar's prefix and name at a '/') .
  void add(const std::string& name, const uint8_t* data, size_t size);
  // The two zero blocks that end an archive, then close; throws on a write error.
  void finish();

 private:
  void write(const void* data, size_t size);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ringflow::data
