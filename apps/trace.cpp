#include "ringflow/apps/trace.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

namespace ringflow::apps {

std::string trace_path_for_rank(const std::string& path, int rank, int world) {
  if (world <= 1) return path;
  std::filesystem::path p(path);
  const std::string extension = p.extension().string();  // ".json", or "" for "trace"
  p.replace_filename(p.stem().string() + ".rank" + std::to_string(rank) + extension);
  return p.string();
}

TraceWriter::TraceWriter(const std::string& path, int rank, Clock::time_point origin,
                         const nlohmann::json& info)
    : path_(path), pid_(rank), origin_(origin) {
  if (path.empty()) return;
  out_.open(path, std::ios::trunc);
  if (!out_) throw std::runtime_error("--trace: cannot open '" + path + "' for writing");
  // The header first, the events streamed after it: only "]}" is left for close().
  nlohmann::json other = info;
  other["rank"] = rank;
  other["clock"] = "steady clock, microseconds since the origin";
  out_ << "{\"displayTimeUnit\":\"ms\",\"otherData\":" << other.dump() << ",\"traceEvents\":[\n";
  write({{"ph", "M"}, {"name", "process_name"}, {"pid", pid_}, {"tid", 0},
         {"args", {{"name", "rank " + std::to_string(rank)}}}});
  write({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid_}, {"tid", 0},
         {"args", {{"sort_index", rank}}}});
  for (const auto& [track, name] : {std::pair{Track::compute, "compute (training thread)"},
                                    std::pair{Track::comm, "comm (communication thread)"}}) {
    const int tid = static_cast<int>(track);
    write({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid_}, {"tid", tid},
           {"args", {{"name", name}}}});
    write({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid_}, {"tid", tid},
           {"args", {{"sort_index", tid}}}});
  }
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (const std::exception&) {
    // Already failing (the destructor runs during an exception, or the disk is full): the
    // trace is a by-product; close() called explicitly reports the error.
  }
}

void TraceWriter::close() {
  if (!out_.is_open()) return;
  out_ << "\n]}\n";
  out_.close();
  if (!out_) throw std::runtime_error("--trace: writing '" + path_ + "' failed");
}

double TraceWriter::micros(Clock::time_point t) const {
  const double us = std::chrono::duration<double, std::micro>(t - origin_).count();
  return std::round(us * 1e3) / 1e3;  // whole nanoseconds: short numbers in the file
}

void TraceWriter::write(const nlohmann::json& event) {
  if (!first_) out_ << ",\n";
  first_ = false;
  out_ << event.dump();
}

void TraceWriter::span(Track track, std::string_view name, std::string_view category,
                       Clock::time_point begin, Clock::time_point end, const nlohmann::json& args) {
  if (!enabled()) return;
  const double ts = micros(begin);
  const double dur = std::round(std::max(0.0, micros(end) - ts) * 1e3) / 1e3;
  nlohmann::json e{{"ph", "X"}, {"name", name}, {"cat", category}, {"pid", pid_},
                   {"tid", static_cast<int>(track)}, {"ts", ts}, {"dur", dur}};
  if (!args.empty()) e["args"] = args;
  write(e);
}

void TraceWriter::flow(std::string_view name, Track from_track, Clock::time_point from,
                       Track to_track, Clock::time_point to) {
  if (!enabled()) return;
  const int64_t id = next_flow_id_++;
  write({{"ph", "s"}, {"name", name}, {"cat", "flow"}, {"id", id}, {"pid", pid_},
         {"tid", static_cast<int>(from_track)}, {"ts", micros(from)}});
  // "bp": "e": bind to the enclosing span at `to` (the collective starting there), not to
  // the next span to begin after it.
  write({{"ph", "f"}, {"bp", "e"}, {"name", name}, {"cat", "flow"}, {"id", id}, {"pid", pid_},
         {"tid", static_cast<int>(to_track)}, {"ts", micros(to)}});
}

void TraceWriter::counter(std::string_view name, Clock::time_point at, const nlohmann::json& values) {
  if (!enabled()) return;
  write({{"ph", "C"}, {"name", name}, {"pid", pid_}, {"ts", micros(at)}, {"args", values}});
}

}  // namespace ringflow::apps
