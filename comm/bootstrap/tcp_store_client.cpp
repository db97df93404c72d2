#include "ringflow/comm/bootstrap/tcp_store_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "ringflow/comm/base/socket.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

// The commands this client sends, by dialect: c10d's QueryType (Note [TCPStore dialects]).
struct Commands {
  uint8_t set, get, add, check, wait;
};
constexpr Commands kTorch1{.set = 0, .get = 2, .add = 3, .check = 4, .wait = 5};
constexpr Commands kTorch2{.set = 1, .get = 3, .add = 4, .check = 5, .wait = 6};
constexpr uint8_t kValidate = 0;  // torch2's, with this magic number
constexpr uint32_t kValidateMagic = 0x3C85F7CE;
constexpr uint8_t kTorch2GetNumKeys = 7;
constexpr uint8_t kReady = 0;        // CHECK's answer (NOT_READY is 1)
constexpr uint8_t kStopWaiting = 0;  // WAIT's answer once every key is set
constexpr size_t kMaxKey = size_t{8} << 10, kMaxValue = size_t{8} << 20;
constexpr uint64_t kMaxAnswer = uint64_t{1} << 30;  // more is a stream out of step
// torch's client puts this before every key (TCPStore's keyPrefix_), so that the keys here
// are those of torch's API.
constexpr char kKeyPrefix[] = "/";

// One command and its arguments, as the server reads them.
class Message {
 public:
  explicit Message(uint8_t command) : bytes_(1, static_cast<char>(command)) {}
  template <class T>
  Message& value(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Message& text(const std::string& s) {
    value<uint64_t>(s.size());
    bytes_ += s;
    return *this;
  }
  Message& key(const std::string& k) { return text(kKeyPrefix + k); }
  Message& keys(const std::vector<std::string>& ks) {
    value<uint64_t>(ks.size());
    for (const std::string& k : ks) key(k);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

const Commands& commands(TcpStoreDialect d) {
  return d == TcpStoreDialect::torch1 ? kTorch1 : kTorch2;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// Note [TCPStore dialects]: the probe, the first bytes on a fresh connection. A server that
// wants VALIDATE first reads them as VALIDATE and four GETNUMKEYS, and answers four counts
// (32 bytes) on a connection now validated. One of 2.0 or earlier reads them as a SET whose
// key length (the 8 bytes after the command) is about 5 * 10^17: it cannot allocate that
// (std::bad_alloc; 64-bit address spaces are far smaller), drops the connection without a
// word and goes on serving the others. Nothing is stored either way.
std::string probe_bytes() {
  Message m(kValidate);
  m.value(kValidateMagic);
  for (int i = 0; i < 4; ++i) m.value(kTorch2GetNumKeys);
  return m.bytes();
}

enum class ProbeAnswer : uint8_t { answered, closed, silent };

// How the server took the probe: a first byte of an answer, or the connection closed before
// one (2.0 or earlier), or nothing until the deadline.
ProbeAnswer probe_answer(int fd, Clock::time_point deadline) {
  for (;;) {
    if (!detail::wait_for(fd, POLLIN, deadline)) return ProbeAnswer::silent;
    char first = 0;
    const ssize_t n = recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return ProbeAnswer::answered;
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) return ProbeAnswer::closed;
  }
}

}  // namespace

TcpStoreClient::TcpStoreClient(TcpStoreOptions options) : options_(std::move(options)) {
  address_ = cat(options_.host, ":", options_.port);
  if (options_.port <= 0 || options_.port > 65535) fail("connecting", "port outside 1..65535");
  std::string error;
  if (!detail::resolve_ipv4(options_.host, &addr_, &error)) fail("connecting", error);
  const auto deadline = Clock::now() + options_.timeout;
  Fd probe = connect(deadline);
  const std::string bytes = probe_bytes();
  error = detail::send_all(probe.get(), bytes.data(), bytes.size(), deadline);
  if (error.empty()) {
    switch (probe_answer(probe.get(), deadline)) {
      case ProbeAnswer::closed:
        dialect_ = TcpStoreDialect::torch1;
        fd_ = connect(deadline);
        break;
      case ProbeAnswer::answered: {
        int64_t counts[4] = {};
        error = detail::recv_all(probe.get(), counts, sizeof counts, deadline);
        dialect_ = TcpStoreDialect::torch2;
        fd_ = std::move(probe);
        break;
      }
      case ProbeAnswer::silent: error = "no answer"; break;
    }
  }
  if (!error.empty()) fail("learning its protocol", error + " (is it a PyTorch TCPStore?)");
  sockaddr_in local{};
  socklen_t len = sizeof local;
  getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&local), &len);
  local_ = local.sin_addr;
}

void TcpStoreClient::fail(const std::string& what, const std::string& error) const {
  throw std::runtime_error(cat("TCPStore at ", address_, ": ", what, ": ", error));
}

Fd TcpStoreClient::connect(Clock::time_point deadline) {
  int err = 0;
  Fd fd = detail::connect_retrying(addr_, htons(static_cast<uint16_t>(options_.port)), deadline,
                                   [&](int e) {
                                     if (options_.on_waiting)
                                       options_.on_waiting(cat("the TCPStore at ", address_,
                                                               " to accept connections (",
                                                               std::strerror(e), ")"));
                                   },
                                   &err);
  if (!fd) {
    fail("connecting", cat("nothing accepted a connection within ", options_.timeout.count(),
                           " ms: ", std::strerror(err)));
  }
  return fd;
}

// After a wait that timed out: a fresh connection, validated where the dialect wants it
// (the server forgets a closed connection's waits).
void TcpStoreClient::reconnect() {
  const auto deadline = Clock::now() + options_.timeout;
  fd_ = connect(deadline);
  if (dialect_ == TcpStoreDialect::torch1) return;
  const std::string validate = Message(kValidate).value(kValidateMagic).bytes();
  const std::string error = detail::send_all(fd_.get(), validate.data(), validate.size(), deadline);
  if (!error.empty()) fail("validating a new connection", error);
}

int TcpStoreClient::connection() {
  if (!fd_) reconnect();
  return fd_.get();
}

void TcpStoreClient::send(const std::string& bytes, const std::string& what) {
  const int fd = connection();
  const std::string error =
      detail::send_all(fd, bytes.data(), bytes.size(), Clock::now() + options_.timeout);
  if (!error.empty()) fail(what, error);
}

void TcpStoreClient::read(void* data, size_t bytes, const std::string& what) {
  const std::string error =
      detail::recv_all(fd_.get(), data, bytes, Clock::now() + options_.timeout);
  if (!error.empty()) fail(what, error);
}

void TcpStoreClient::set(const std::string& key, const std::string& value) {
  RF_CHECK(key.size() < kMaxKey, "TcpStoreClient::set: a key of ", key.size(), " bytes (at most ",
           kMaxKey - 1, ")");
  RF_CHECK(value.size() <= kMaxValue, "TcpStoreClient::set('", key, "'): a value of ",
           value.size(), " bytes (at most ", kMaxValue, ", PyTorch's libuv store's limit)");
  send(Message(commands(dialect_).set).key(key).text(value).bytes(), cat("set '", key, "'"));
}

std::string TcpStoreClient::get(const std::string& key) {
  wait({key});
  const std::string what = cat("get '", key, "'");
  send(Message(commands(dialect_).get).key(key).bytes(), what);
  uint64_t length = 0;
  read(&length, sizeof length, what);
  if (length > kMaxAnswer) fail(what, cat("an answer of ", length, " bytes (out of step)"));
  std::string value(length, '\0');
  read(value.data(), length, what);
  return value;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  const std::string what = cat("add to '", key, "'");
  send(Message(commands(dialect_).add).key(key).value(delta).bytes(), what);
  int64_t sum = 0;
  read(&sum, sizeof sum, what);
  return sum;
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  const std::string what = cat("check key(s) ", joined(keys));
  send(Message(commands(dialect_).check).keys(keys).bytes(), what);
  uint8_t answer = 0;
  read(&answer, 1, what);
  return answer == kReady;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) { wait(keys, options_.timeout); }

void TcpStoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const std::string what = cat("wait for key(s) ", joined(keys));
  send(Message(commands(dialect_).wait).keys(keys).bytes(), what);
  const auto deadline = Clock::now() + timeout;
  // The answer comes once every key is set; until then, a word about once a second.
  const auto slice = [&] { return std::min(deadline, Clock::now() + std::chrono::seconds(1)); };
  while (!detail::wait_for(fd_.get(), POLLIN, slice())) {
    if (Clock::now() >= deadline) {
      fd_.reset();  // the server drops this connection's wait with it
      fail(what, cat("timed out after ", timeout.count(), " ms"));
    }
    if (options_.on_waiting) {
      options_.on_waiting(cat("key(s) ", joined(keys), " in the TCPStore at ", address_));
    }
  }
  uint8_t answer = 0;
  read(&answer, 1, what);
  if (answer != kStopWaiting) fail(what, cat("answer ", int{answer}, " (out of step)"));
}

}  // namespace ringflow::comm
