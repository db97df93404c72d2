#include "ringflow/framework/data/tar.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ringflow::data {
namespace {

constexpr int64_t kBlock = 512;

int64_t padded(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// A header's numeric field: octal digits (spaces and NULs around), or GNU's base-256.
int64_t parse_number(const uint8_t* field, size_t width) {
  if (field[0] & 0x80) {
    int64_t v = field[0] & 0x7F;
    for (size_t i = 1; i < width; ++i) v = (v << 8) | field[i];
    return v;
  }
  int64_t v = 0;
  size_t i = 0;
  while (i < width && (field[i] == ' ' || field[i] == 0)) ++i;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) v = v * 8 + (field[i] - '0');
  return v;
}

std::string field_string(const uint8_t* field, size_t width) {
  return std::string(reinterpret_cast<const char*>(field), strnlen(reinterpret_cast<const char*>(field), width));
}

bool checksum_ok(const uint8_t* h) {
  int64_t sum = 0;
  for (int64_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum == parse_number(h + 148, 8);
}

// The "path" record of a pax extended header ("<length> path=<name>\n" lines), if any.
std::string pax_path(const std::vector<uint8_t>& data) {
  const std::string s(data.begin(), data.end());
  size_t at = 0;
  while (at < s.size()) {
    const size_t space = s.find(' ', at);
    if (space == std::string::npos) break;
    const size_t length = std::strtoul(s.c_str() + at, nullptr, 10);
    if (length == 0 || at + length > s.size()) break;
    const std::string record = s.substr(space + 1, at + length - space - 2);  // without '\n'
    if (record.rfind("path=", 0) == 0) return record.substr(5);
    at += length;
  }
  return "";
}

}  // namespace

TarReader::TarReader(std::string path) : path_(std::move(path)) {
  errno = 0;
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_) throw std::runtime_error(path_ + ": cannot open: " + std::strerror(errno));
  std::fseek(file_, 0, SEEK_END);
  size_ = std::ftell(file_);
  std::fseek(file_, 0, SEEK_SET);
}

TarReader::~TarReader() {
  if (file_) std::fclose(file_);
}

bool TarReader::read_block(uint8_t* block, const char* what) {
  const size_t n = std::fread(block, 1, kBlock, file_);
  if (n == 0 && at_ == size_) return false;
  if (n != static_cast<size_t>(kBlock))
    throw std::runtime_error(path_ + ": cut inside " + what + " at byte " + std::to_string(at_) +
                             " (the file ends at byte " + std::to_string(size_) + ")");
  at_ += kBlock;
  return true;
}

void TarReader::read_exactly(uint8_t* dst, int64_t n, const std::string& member) {
  const size_t got = std::fread(dst, 1, static_cast<size_t>(n), file_);
  if (static_cast<int64_t>(got) != n)
    throw std::runtime_error(path_ + ": cut inside member '" + member + "': it has " + std::to_string(n) +
                             " bytes from byte " + std::to_string(at_) + ", the file ends at byte " +
                             std::to_string(size_));
  at_ += n;
}

void TarReader::skip(int64_t n, const std::string& member) {
  if (at_ + n > size_)
    throw std::runtime_error(path_ + ": cut inside member '" + member + "': it has " + std::to_string(n) +
                             " bytes from byte " + std::to_string(at_) + ", the file ends at byte " +
                             std::to_string(size_));
  std::fseek(file_, static_cast<long>(n), SEEK_CUR);
  at_ += n;
}

bool TarReader::next(TarMember& m, const std::function<bool(const std::string&)>& want_data) {
  std::string long_name;  // from a GNU 'L' entry or a pax header, for the next member
  uint8_t h[kBlock];
  for (;;) {
    const int64_t header_at = at_;
    if (!read_block(h, "a header")) return false;
    if (std::all_of(h, h + kBlock, [](uint8_t b) { return b == 0; })) return false;  // end of archive
    if (!checksum_ok(h))
      throw std::runtime_error(path_ + ": no tar header at byte " + std::to_string(header_at) +
                               " (its checksum fails): not a tar file, or a damaged one");
    const char type = static_cast<char>(h[156]);
    std::string name = field_string(h, 100);
    const std::string prefix = field_string(h + 345, 155);
    if (!prefix.empty() && std::memcmp(h + 257, "ustar", 5) == 0) name = prefix + "/" + name;
    if (!long_name.empty()) name = long_name;
    const int64_t size = parse_number(h + 124, 12);
    if (type == 'L' || type == 'x') {  // the next member's name
      std::vector<uint8_t> data(static_cast<size_t>(size));
      read_exactly(data.data(), size, name);
      skip(padded(size) - size, name);
      long_name = type == 'L' ? field_string(data.data(), data.size()) : pax_path(data);
      continue;
    }
    if (type != '0' && type != '\0' && type != '7') {  // folders, links, global headers
      skip(padded(size), name);
      long_name.clear();
      continue;
    }
    m.name = name;
    m.size = size;
    m.offset = at_;
    if (!want_data || want_data(name)) {
      m.data.resize(static_cast<size_t>(size));
      read_exactly(m.data.data(), size, name);
      skip(padded(size) - size, name);
    } else {
      m.data.clear();
      skip(padded(size), name);
    }
    return true;
  }
}

TarWriter::TarWriter(std::string path) : path_(std::move(path)) {
  errno = 0;
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw std::runtime_error(path_ + ": cannot write: " + std::strerror(errno));
}

TarWriter::~TarWriter() {
  if (!file_) return;
  try {
    finish();
  } catch (const std::exception&) {  // a destructor must not throw; finish() says it
  }
}

void TarWriter::write(const void* data, size_t size) {
  if (std::fwrite(data, 1, size, file_) != size)
    throw std::runtime_error(path_ + ": write error: " + std::strerror(errno));
}

void TarWriter::add(const std::string& name, const uint8_t* data, size_t size) {
  uint8_t h[kBlock] = {};
  std::string prefix, base = name;
  if (name.size() > 100) {  // ustar: prefix (155) + '/' + name (100)
    const size_t slash = name.rfind('/', 155);
    if (slash == std::string::npos || name.size() - slash - 1 > 100 || name.size() > 255)
      throw std::invalid_argument(path_ + ": member name '" + name + "' does not fit a ustar header");
    prefix = name.substr(0, slash);
    base = name.substr(slash + 1);
  }
  std::memcpy(h, base.data(), base.size());
  std::memcpy(h + 345, prefix.data(), prefix.size());
  std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
  std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  int sum = 0;
  for (uint8_t b : h) sum += b;
  std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
  write(h, kBlock);
  write(data, size);
  static const uint8_t zeros[kBlock] = {};
  write(zeros, static_cast<size_t>(padded(static_cast<int64_t>(size)) - static_cast<int64_t>(size)));
}

void TarWriter::finish() {
  if (!file_) return;
  static const uint8_t zeros[2 * kBlock] = {};
  std::FILE* f = file_;
  try {
    write(zeros, sizeof zeros);
  } catch (...) {
    file_ = nullptr;
    std::fclose(f);
    throw;
  }
  file_ = nullptr;
  if (std::fclose(f) != 0) throw std::runtime_error(path_ + ": write error on close: " + std::strerror(errno));
}

}  // namespace ringflow::data
