#include "ringflow/apps/report.h"

#include <fmt/core.h>


#include "ringflow/framework/ringflow.h"

namespace ringflow::apps {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double unix_seconds(WallClock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

std::string duration_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {} s", s / 60, s % 60);
  return fmt::format("{} h {} min", s / 3600, s % 3600 / 60);
}

nlohmann::json metrics_header(const std::vector<std::string>& arguments, const BuildInfo& build,
                              const std::vector<std::string>& hosts, int world_size) {
  nlohmann::json libraries = nlohmann::json::object();
  for (const LibraryVersion& l : build.libraries) libraries[l.name] = l.version;
  const CpuIsa& c = build.cpu;
  return {{"type", "header"},
          {"arguments", arguments},
          {"version", build.version},
          {"commit", build.commit},
          {"build", {{"build_type", build.build_type}, {"compiler", build.compiler},
                     {"cuda", build.cuda}, {"cuda_architectures", build.cuda_architectures},
                     {"cudnn", build.cudnn}, {"mpi", build.mpi}}},
          {"cpu", {{"model", c.model}, {"avx2", c.avx2}, {"avx512", c.avx512},
                   {"avx512_bf16", c.avx512_bf16}, {"amx", c.amx}, {"onednn_isa", c.onednn_isa},
                   {"bf16_winograd", c.bf16_winograd}, {"f32_winograd", c.f32_winograd}}},
          {"libraries", libraries},
          {"hosts", hosts},
          {"world_size", world_size}};
}

double min_over_ranks(double value, comm::ProcessGroup* pg, comm::Timeout timeout) {
  if (!pg || pg->size() == 1) return value;
  Tensor t = from_vector({value}, {1}, DType::f64);
  comm::CollectiveOptions o;
  o.timeout = timeout;
  o.op = comm::ReduceOp::min;
  pg->allreduce(t, o)->wait();
  return t.item();
}

AcrossRanks across_ranks(const EpochStats& s, comm::ProcessGroup* pg, comm::Timeout timeout) {
  // Ranks that train at their own pace (fedavg over unequal shares) log different numbers
  // of iterations: the first ones that every rank has are combined.
  const auto logged = static_cast<size_t>(
      min_over_ranks(static_cast<double>(s.logged.size()), pg, timeout));
  std::vector<Values> mine{s.tally.figures()};
  for (size_t i = 0; i < logged; ++i) mine.push_back(s.logged[i].figures);
  std::vector<Combined> all = combine_ranks(mine, pg, timeout);
  AcrossRanks r{.epoch = std::move(all.front()), .first_only = s.tally.timed() == 0};
  for (size_t i = 0; i < logged; ++i) r.logged.push_back({&s.logged[i], std::move(all[i + 1])});
  return r;
}

void put_figures(nlohmann::json& j, Records record, const Values& value, const Values* max) {
  const std::vector<Metric>& metrics = value.schema().metrics();
  for (size_t i = 0; i < metrics.size(); ++i) {
    const Metric& m = metrics[i];
    if (!(m.records & record) || (m.comm && !max)) continue;
    const std::string& key = m.key(record);
    j[key] = value[MetricId{i}];
    if (max && m.across == Across::mean_max) j["max_" + key] = (*max)[MetricId{i}];
  }
}

void trace_counters(TraceWriter& trace, Clock::time_point at, const Values& figures) {
  if (!trace.enabled()) return;
  const std::vector<Metric>& metrics = figures.schema().metrics();
  for (size_t i = 0; i < metrics.size(); ++i) {
    if (metrics[i].records & kIterationRecord)
      trace.counter(metrics[i].name, at, {{metrics[i].name, figures[MetricId{i}]}});
  }
}

namespace {

std::string caps_text(const comm::BucketCaps& c) {
  return c.first_mb == c.cap_mb ? fmt::format("{:g} MiB", c.cap_mb)
                                : fmt::format("{:g} MiB (first {:g})", c.cap_mb, c.first_mb);
}

nlohmann::json caps_json(const comm::BucketCaps& c) {
  return {{"first_mb", c.first_mb}, {"cap_mb", c.cap_mb}};
}

}  // namespace

std::string describe_bucket_tuning(const comm::BucketTuning& t) {
  std::string tried;
  for (size_t k = 0; k < t.tried.size(); ++k) {
    tried += fmt::format("{}{}: {:.1f} ms", k ? ", " : "", caps_text(t.tried[k]), t.ms[k]);
  }
  return fmt::format("ddp: bucket caps measured (backward with its communication, median, "
                     "slowest rank): {}; chose {}",
                     tried, caps_text(t.tried.at(static_cast<size_t>(t.chosen))));
}

nlohmann::json bucket_tuning_json(const comm::BucketTuning& t) {
  nlohmann::json tried = nlohmann::json::array();
  for (size_t k = 0; k < t.tried.size(); ++k) {
    nlohmann::json c = caps_json(t.tried[k]);
    c["backward_ms"] = t.ms[k];
    tried.push_back(c);
  }
  return {{"type", "bucket_tuning"},
          {"tried", tried},
          {"chosen", caps_json(t.tried.at(static_cast<size_t>(t.chosen)))}};
}

namespace {

// How the table writes a figure of `unit`: scale, decimals, unit.
struct Shown {
  double scale;
  int decimals;
  const char* unit;
};

Shown shown(Unit unit) {
  switch (unit) {
    case Unit::ms: return {1, 1, "ms"};
    case Unit::bytes: return {1e-6, 2, "MB"};
    case Unit::ratio: return {100, 1, "%"};
    case Unit::count: return {1, 0, ""};
    case Unit::per_second: return {1, 1, "/s"};
    case Unit::value: return {1, 4, ""};
  }
  return {1, 4, ""};
}

// One row: label, the mean, its share of the whole (phases), the largest rank's.
std::string table_row(const Metric& m, double mean, double max, double whole, bool distributed) {
  const Shown u = shown(m.unit);
  std::string line = fmt::format("  {:<28}{:>10.{}f} {:<2}", m.label, mean * u.scale, u.decimals, u.unit);
  line += !m.part_of.empty() ? fmt::format(" ({:3.0f}%)", whole > 0 ? 100 * mean / whole : 0.0)
                             : std::string(7, ' ');
  if (distributed) line += fmt::format("{:>12.{}f} {}", max * u.scale, u.decimals, u.unit);
  line.erase(line.find_last_not_of(' ') + 1);
  return line;
}

}  // namespace

std::string epoch_table(const Combined& epoch, int world, bool distributed) {
  const Schema& schema = epoch.value.schema();
  std::string table;
  for (const bool totals : {false, true}) {
    bool header = false;
    for (size_t i = 0; i < schema.size(); ++i) {
      const Metric& m = schema.metrics()[i];
      if (m.label.empty() || !(m.records & kEpochRecord) || (m.comm && !distributed) ||
          (m.over == Over::sum) != totals || (m.if_nonzero && epoch.max[MetricId{i}] == 0))
        continue;
      if (!header && distributed) {
        table += fmt::format("  {:<28}{:>12}{:>22}\n", totals ? "whole epoch, per rank"
                                                              : fmt::format("per iteration, {} ranks", world),
                             "mean", "max");
      }
      header = true;
      const double whole = m.part_of.empty() ? 0 : epoch.value[schema.id(m.part_of)];
      table += table_row(m, epoch.value[MetricId{i}], epoch.max[MetricId{i}], whole, distributed) + "\n";
    }
  }
  return table;
}

}  // namespace ringflow::apps
