// Trace: one rank's training timeline as a Chrome trace-event JSON file (the "JSON Object
// Format" of the Trace Event Format), which opens in https://ui.perfetto.dev and
// chrome://tracing. apps/train writes it for --trace FILE:
//   pid = the rank (so several ranks' traceEvents can be concatenated into one timeline);
//   tid 1 "compute": per iteration a span holding data wait, forward, backward, the waits
//         for communication (nested where they happen: inside forward, inside backward,
//         after backward) and the optimizer step; between iterations the epoch's end
//         (cat "epoch": the statistics across ranks, rank 0's evaluation and checkpoint);
//   tid 2 "comm": each collective as the communication thread ran it (ddp: one span per
//         bucket, and the buffer broadcast before forward where the model has buffers;
//         gather-scatter and allreduce: one per gradient), with a flow arrow from the
//         moment the training thread launched it;
//   counters: each iteration's figures (train's schema: bytes, overlap, loss, ...), a track each.
// Timestamps are microseconds on the steady clock since `origin` (one per rank). Events are
// streamed to the file as they come (each one serialised by nlohmann::json); the closing
// brackets are written by close() or the destructor, so a run that throws still leaves a
// valid file. Not thread-safe: the training thread alone writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ringflow::apps {

// --trace FILE for `rank` of `world`: FILE itself for one process, otherwise the rank
// inserted before the extension: trace.json -> trace.rank1.json, out/trace -> out/trace.rank1.
std::string trace_path_for_rank(const std::string& path, int rank, int world);

enum class Track : int { compute = 1, comm = 2 };

class TraceWriter {
 public:
  using Clock = std::chrono::steady_clock;

  // An empty path: a writer that writes nothing (enabled() false). Otherwise opens `path`
  // (throws std::runtime_error naming it when it cannot), writes the header, the process
  // name ("rank R") and the tracks' names. `info` goes into the file's "otherData".
  TraceWriter(const std::string& path, int rank, Clock::time_point origin,
              const nlohmann::json& info = nlohmann::json::object());
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  bool enabled() const { return out_.is_open(); }

  // A complete event ("ph": "X") on `track` from `begin` to `end`; `category` is the "cat"
  // field ("iteration", "compute", "wait", "comm", "epoch").
  void span(Track track, std::string_view name, std::string_view category, Clock::time_point begin,
            Clock::time_point end, const nlohmann::json& args = nlohmann::json::object());
  // A flow arrow ("ph": "s" then "f") from the span enclosing `from` on `from_track` to the
  // span enclosing `to` on `to_track` (e.g. a bucket's launch inside backward to its
  // allreduce on the comm track).
  void flow(std::string_view name, Track from_track, Clock::time_point from, Track to_track,
            Clock::time_point to);

  // A counter ("ph": "C") at `at` on this rank: `values` ({series: number}) are its
  // series, drawn as one track named `name` (the figures of apps/step_metrics.h, one each).
  void counter(std::string_view name, Clock::time_point at, const nlohmann::json& values);

  // Writes the closing brackets and closes the file (also done by the destructor).
  void close();

 private:
  double micros(Clock::time_point t) const;  // since origin_
  void write(const nlohmann::json& event);

  std::ofstream out_;
  std::string path_;
  int pid_ = 0;
  Clock::time_point origin_;
  bool first_ = true;
  int64_t next_flow_id_ = 1;
};

}  // namespace ringflow::apps
