#include "ringflow/framework/printable.h"

#include <cstdint>

namespace ringflow {
namespace {

// The length of the valid UTF-8 sequence of a printable character at text[at], or 0.
size_t printable_utf8_length(std::string_view text, size_t at) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[at + k]); };
  const uint8_t lead = byte(0);
  size_t length = 0;
  uint32_t code = 0, smallest = 0;
  if (lead >= 0xc2 && lead <= 0xdf) length = 2, code = lead & 0x1fu, smallest = 0x80;
  else if (lead >= 0xe0 && lead <= 0xef) length = 3, code = lead & 0x0fu, smallest = 0x800;
  else if (lead >= 0xf0 && lead <= 0xf4) length = 4, code = lead & 0x07u, smallest = 0x10000;
  else return 0;
  if (at + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(k) & 0xc0u) != 0x80) return 0;
    code = (code << 6) | (byte(k) & 0x3fu);
  }
  const bool surrogate = code >= 0xd800 && code <= 0xdfff;
  const bool c1_control = code < 0xa0;  // U+0080..U+009F
  if (code < smallest || surrogate || code > 0x10ffff || c1_control) return 0;
  return length;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const auto c = static_cast<uint8_t>(text[at]);
    if ((c >= 0x20 && c < 0x7f) || c == '\n') {
      out += static_cast<char>(c);
      ++at;
    } else if (const size_t n = c >= 0x80 ? printable_utf8_length(text, at) : 0; n > 0) {
      out.append(text.substr(at, n));
      at += n;
    } else {
      constexpr const char* kHex = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
      ++at;
    }
  }
  return out;
}

}  // namespace ringflow
