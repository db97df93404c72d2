#include "ringflow/bench/command_output.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>

#include <fmt/core.h>

extern char** environ;

namespace ringflow::bench {

std::optional<std::string> command_output(const std::string& command, const std::string& who) {
  std::fflush(stdout);  // what was printed so far comes first
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) {
    fmt::print(stderr, "{}: cannot run: {}\n", who, command);
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) {
    fmt::print(stderr, "{}: `{}` failed (status {}):\n{}\n", who, command, status, out);
    return std::nullopt;
  }
  return out;
}

namespace {

// Closes what is open of fds.
void close_all(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
}

}  // namespace

Coprocess::Coprocess(const std::string& command, std::string who, std::chrono::milliseconds grace)
    : command_(command), who_(std::move(who)), grace_(grace) {
  // A helper that died must not kill us with SIGPIPE on the next request: send() says so
  // instead. Process-wide; the helper itself gets the default back (below).
  std::signal(SIGPIPE, SIG_IGN);
  std::fflush(stdout);
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  const auto fail = [&](const char* what) {
    close_all({in[0], in[1], out[0], out[1]});
    return std::runtime_error(fmt::format("{}: cannot run `{}`: {} failed", who_, command_, what));
  };
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw fail("pipe2");
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  // An ignored signal stays ignored across exec: without SIGDEF the helper would not die when
  // we stop reading, and could write into a closed pipe forever.
  int failed = posix_spawn_file_actions_init(&actions);
  failed = failed ? failed : posix_spawnattr_init(&attr);
  failed = failed ? failed : posix_spawnattr_setsigdefault(&attr, &pipe_signal);
  // Its own process group (pgroup 0: its pid), so that signals past the grace reach what
  // the shell started too.
  failed = failed ? failed : posix_spawnattr_setpgroup(&attr, 0);
  const short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP;
  failed = failed ? failed : posix_spawnattr_setflags(&attr, flags);
  // dup2 clears O_CLOEXEC on the copies.
  failed = failed ? failed : posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  failed = failed ? failed : posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  const char* argv[] = {"sh", "-c", command_.c_str(), nullptr};
  failed = failed ? failed : ::posix_spawn(&pid_, "/bin/sh", &actions, &attr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (failed != 0) {
    pid_ = -1;
    throw fail("posix_spawn");
  }
  close_all({in[0], out[1]});
  in[0] = out[1] = -1;
  to_ = ::fdopen(in[1], "w");
  if (to_) in[1] = -1;
  from_ = to_ ? ::fdopen(out[0], "r") : nullptr;
  if (!from_) {
    if (to_) std::fclose(to_);
    to_ = nullptr;
    close_all({in[1], out[0]});  // its input closed: the helper ends
    finish();
    throw std::runtime_error(fmt::format("{}: cannot run `{}`: fdopen failed", who_, command_));
  }
}

Coprocess::~Coprocess() {
  if (from_) std::fclose(from_);
  finish();
}

int Coprocess::finish() {
  if (to_) std::fclose(to_);
  to_ = nullptr;
  const auto signal_group = [&](int sig, const char* name, const char* since) {
    fmt::print(stderr, "{}: `{}` did not end within {} ms of {}: sending {}\n", who_, command_,
               grace_.count(), since, name);
    ::kill(-pid_, sig);
  };
  if (reaped_within(grace_)) return status_;
  signal_group(SIGTERM, "SIGTERM", "its input closing");
  if (reaped_within(grace_)) return status_;
  signal_group(SIGKILL, "SIGKILL", "SIGTERM");
  reaped_within(std::chrono::hours(24));  // SIGKILL cannot be ignored
  return status_;
}

bool Coprocess::reaped_within(std::chrono::milliseconds limit) {
  if (pid_ < 0) return true;  // reaped before (waitpid(-1) would take any child)
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == pid_ || (got < 0 && errno != EINTR)) {
      status_ = got < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
      return true;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
    ::usleep(10000);
  }
}

bool Coprocess::send(const std::string& line) {
  if (to_ && std::fputs(line.c_str(), to_) >= 0 && std::fputc('\n', to_) != EOF && std::fflush(to_) == 0) return true;
  fmt::print(stderr, "{}: `{}` no longer reads its input (it ended)\n", who_, command_);
  return false;
}

std::optional<std::string> Coprocess::read_line() {
  std::string line;
  for (int c; (c = std::fgetc(from_)) != EOF;) {
    if (c == '\n') return line;
    line.push_back(static_cast<char>(c));
  }
  if (!line.empty()) return line;  // a last line without its newline
  if (pid_ < 0) return std::nullopt;  // said so before
  // An end of input ends the helper if only its output was closed.
  fmt::print(stderr, "{}: `{}` ended (status {}), no line left to read\n", who_, command_, finish());
  return std::nullopt;
}

}  // namespace ringflow::bench
