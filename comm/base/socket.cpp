#include "ringflow/comm/base/socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "ringflow/framework/error.h"

namespace ringflow::comm::detail {

std::string endpoint_text(uint32_t addr, uint16_t port) {
  char text[INET_ADDRSTRLEN] = {};
  in_addr a{addr};
  inet_ntop(AF_INET, &a, text, sizeof text);
  return cat(text, ":", ntohs(port));
}

bool pick_address(const std::string& interface, in_addr* out, std::string* error) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    *error = cat("getifaddrs: ", std::strerror(errno));
    return false;
  }
  auto suitable = [&](const ifaddrs* a) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) return false;
    const std::string name = a->ifa_name;
    if (!interface.empty()) return name == interface;
    return !(a->ifa_flags & IFF_LOOPBACK) && name.rfind("docker", 0) != 0 &&
           name.rfind("virbr", 0) != 0;
  };
  bool found = false;
  for (const ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (suitable(a)) {
      *out = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr;
      found = true;
    }
  }
  freeifaddrs(list);
  if (found) return true;
  if (!interface.empty()) {
    *error = cat("no network interface '", interface, "' that is up with an IPv4 address");
    return false;
  }
  out->s_addr = htonl(INADDR_LOOPBACK);
  return true;
}

bool resolve_ipv4(const std::string& host, in_addr* out, std::string* error) {
  if (inet_pton(AF_INET, host.c_str(), out) == 1) return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int code = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (code != 0 || !found) {
    *error = cat("cannot resolve host '", host, "': ", gai_strerror(code));
    return false;
  }
  *out = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return true;
}

int poll_timeout(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int timeout = poll_timeout(deadline);
    const int r = poll(&p, 1, timeout);
    if (r > 0 || (r < 0 && errno != EINTR)) return true;
    if (r == 0 && timeout == 0) return false;
  }
}

Fd listen_on(in_addr addr, uint16_t port, int backlog, sockaddr_in* bound, std::string* error) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  sa.sin_port = port;
  socklen_t len = sizeof sa;
  const int one = 1;
  // A fixed port (a rendezvous) must be reusable at once by the next run.
  if (fd && port != 0) setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      listen(fd.get(), backlog) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    *error = cat("could not listen on ", endpoint_text(addr.s_addr, port), ": ",
                 std::strerror(errno));
    return Fd();
  }
  *bound = sa;
  return fd;
}

Fd connect_to(in_addr addr, uint16_t port, Deadline deadline, int* err) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    *err = errno;
    return fd;
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  sa.sin_port = port;
  *err = 0;
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    *err = errno;
    if (*err == EINPROGRESS) {
      socklen_t len = sizeof *err;
      *err = !wait_for(fd.get(), POLLOUT, deadline)                          ? ETIMEDOUT
             : getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, err, &len) != 0 ? errno
                                                                           : *err;
    }
  }
  if (*err != 0) fd.reset();
  return fd;
}

Fd connect_retrying(in_addr addr, uint16_t port, Deadline deadline,
                    const std::function<void(int err)>& refused, int* err) {
  for (;;) {
    Fd fd = connect_to(addr, port, deadline, err);
    if (fd || std::chrono::steady_clock::now() >= deadline) return fd;
    if (refused) refused(*err);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string send_all(int fd, const void* data, size_t bytes, Deadline deadline) {
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::send(fd, p + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return errno == EPIPE || errno == ECONNRESET ? "the connection was closed"
                                                   : std::strerror(errno);
    } else if (!wait_for(fd, POLLOUT, deadline)) {
      return "timed out";
    }
  }
  return "";
}

std::string recv_all(int fd, void* data, size_t bytes, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::recv(fd, p + done, bytes - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      return n == 0 || errno == ECONNRESET ? "the connection was closed" : std::strerror(errno);
    } else if (!wait_for(fd, POLLIN, deadline)) {
      return "timed out";
    }
  }
  return "";
}

}  // namespace ringflow::comm::detail
