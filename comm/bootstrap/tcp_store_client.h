// TcpStoreClient: a client of PyTorch's TCPStore (torch.distributed.TCPStore), the key-value
// server that torchrun's agent keeps at MASTER_ADDR:MASTER_PORT, so that ranks torchrun
// started meet through it as PyTorch's own ranks do. It does what a rendezvous needs: set,
// get (waiting for the key), add, check and wait, each bounded by a timeout.
//
// Note [TCPStore dialects]: the wire protocol (torch/csrc/distributed/c10d/TCPStore*.cpp) is
// one command byte, then its arguments: strings and values as a u64 length and the bytes,
// integers as 8 bytes in the host's order. PyTorch up to 2.0 numbers the commands from
// SET = 0. During 2.1's development a VALIDATE command (a magic number) was put in front,
// which renumbers the rest, and the servers since (the classic one, and the libuv one that is
// the default since 2.4) drop or ignore a connection whose first command is not VALIDATE. No
// request means the same to both, so the client first sends bytes that each reads
// differently and learns the server's dialect from its answer (probe_bytes in the .cpp),
// then speaks only that. It uses only commands whose arguments and answers are the same in
// both: SET, GET, ADD, CHECK, WAIT (GET after WAIT: the classic server drops a connection
// that asks for a key not set).
//
// Not thread-safe: one call at a time per client.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ringflow/comm/base/fd.h"

namespace ringflow::comm {

enum class TcpStoreDialect : uint8_t {
  torch1,  // PyTorch 1.x and 2.0
  torch2,  // later: VALIDATE first
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // a name or an IPv4 address
  int port = 29500;
  // Reaching the store (tried again until it listens), and each wait, at most this.
  std::chrono::milliseconds timeout{300000};
  // Called about once a second while a call blocks, with what it waits for ("the TCPStore
  // at h:p to accept connections (Connection refused)", "key(s) k in the TCPStore at h:p").
  std::function<void(const std::string& what)> on_waiting = nullptr;
};

class TcpStoreClient {
 public:
  // Connects, trying again until the store listens, and learns its dialect. Throws
  // std::runtime_error naming the address when nothing listens there within the timeout,
  // or what listens does not answer as a TCPStore.
  explicit TcpStoreClient(TcpStoreOptions options);

  // Keys are those of torch's TCPStore API: what set("a", v) writes here, Python's
  // store.get("a") reads. Values are bytes of any kind, up to 8 MiB (the libuv server's
  // limit; keys up to 8 KiB).
  void set(const std::string& key, const std::string& value);
  // The key's value, once some client has set it (waits as wait() does).
  std::string get(const std::string& key);
  // Adds delta to the key's integer value (0 when unset) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);
  // Whether every key is set, without waiting.
  bool check(const std::vector<std::string>& keys);
  // Until every key is set. Throws std::runtime_error naming the keys and the store after
  // the timeout (options' by default); the client stays usable.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  TcpStoreDialect dialect() const { return dialect_; }
  const std::string& address() const { return address_; }  // "host:port", for messages
  // This host's IPv4 address on its route to the store: one the store's host, and so most
  // likely the other ranks, can reach it at.
  in_addr local_address() const { return local_; }

 private:
  Fd connect(std::chrono::steady_clock::time_point deadline);
  void reconnect();
  int connection();
  void send(const std::string& bytes, const std::string& what);  // one command
  void read(void* data, size_t bytes, const std::string& what);
  [[noreturn]] void fail(const std::string& what, const std::string& error) const;

  TcpStoreOptions options_;
  std::string address_;
  in_addr addr_{}, local_{};
  TcpStoreDialect dialect_ = TcpStoreDialect::torch2;
  Fd fd_;  // invalid after a wait that timed out: the next call connects anew
};

}  // namespace ringflow::comm
