// Telemetry: every figure a program reports (a phase's time, bytes, loss, images/s, ...),
// declared once in a Schema with its name, unit and how it combines over the iterations of
// an epoch and over the ranks; a record of them laid out by that schema (Values); one rank's
// epoch added up from its iterations (Tally); and the ranks' records combined in one
// collective (combine_ranks). The JSON lines, the console table and the trace's counters
// (apps/report.h) and ringflow-report read the same declarations: a new figure is one line
// in its schema (train's: apps/step_metrics.h) and one where it is measured.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ringflow/comm/group/process_group.h"

namespace ringflow::apps {

enum class Unit { ms, bytes, ratio, count, per_second, value };
const char* unit_name(Unit unit);  // "ms", "bytes", "ratio", "count", "1/s", ""

// How one rank's figure of each iteration makes its figure of an epoch.
enum class Over {
  mean,  // per iteration: the mean over the iterations after the first (which pays for
         // first-touch allocations and caches), or the first's when the epoch ran no other
  sum,   // the epoch's total: every iteration's, and what was added between them
  max,   // the largest of its iterations' (a peak)
  last,  // the last iteration's (a setting, as the learning rate)
};

// How the ranks' figures make the job's.
enum class Across {
  mean,
  sum,
  max,
  mean_max,  // the mean, and the largest rank's beside it (max_<name>)
  job,       // derived from the job's figures, not the ranks' (a ratio of sums)
};

// Which records of the JSON lines carry a figure (a bit set); none: an intermediate sum
// that derived figures are made of.
enum Records : unsigned { kNoRecord = 0, kIterationRecord = 1, kEpochRecord = 2, kBothRecords = 3 };

class Values;

struct Metric {
  std::string name = {};  // its key in the JSON lines; max_<name> the largest rank's
  Unit unit = Unit::value;
  Over over = Over::mean;
  Across across = Across::mean_max;
  unsigned records = kBothRecords;
  std::string label = {};  // its row in the console table (empty: none)
  std::string epoch_name = {};  // its key in epoch records where it differs from name
  // A phase of that metric (the iteration): the table shows its share of it, the report
  // stacks the phases.
  std::string part_of = {};
  bool comm = false;  // reported only where several ranks communicate
  // In the table only where some rank's is not 0 (a feature that most runs do not use).
  bool if_nonzero = false;
  // Computed from the record's figures declared before it, at every stage; with
  // Across::job from the job's figures, otherwise each rank's, then combined.
  std::function<double(const Values&)> derive = {};

  const std::string& key(Records record) const {
    return record == kEpochRecord && !epoch_name.empty() ? epoch_name : name;
  }
};

// A metric's place in its schema (and in every record laid out by it).
struct MetricId {
  size_t index = 0;
};

class Schema {
 public:
  // Throws std::invalid_argument for a name used before, an empty one, or Across::job
  // without a derivation.
  MetricId add(Metric metric);
  size_t size() const { return metrics_.size(); }
  const Metric& operator[](MetricId id) const { return metrics_.at(id.index); }
  const std::vector<Metric>& metrics() const { return metrics_; }
  std::optional<MetricId> find(std::string_view name) const;
  MetricId id(std::string_view name) const;  // throws std::invalid_argument naming it

 private:
  std::vector<Metric> metrics_;
};

// One record: a figure per metric of a schema (which must outlive it), all 0 at first.
class Values {
 public:
  explicit Values(const Schema& schema) : schema_(&schema), v_(schema.size(), 0.0) {}
  double& operator[](MetricId id) { return v_.at(id.index); }
  double operator[](MetricId id) const { return v_.at(id.index); }
  const Schema& schema() const { return *schema_; }
  std::span<const double> data() const { return v_; }
  std::span<double> data() { return v_; }
  // The derived figures from the others, in declaration order: all of them, or (job) only
  // those of Across::job.
  void derive(bool job = false);

 private:
  const Schema* schema_;
  std::vector<double> v_;
};

// One rank's epoch, added up from its iterations by each metric's Over (derived figures
// are not added: figures() derives them from the sums).
class Tally {
 public:
  explicit Tally(const Schema& schema) : sums_(schema), first_(schema) {}
  void add_iteration(const Values& v);
  // Figures between iterations (fedavg's end-of-epoch round): into the Over::sum ones.
  void add_between(const Values& v);
  Values figures() const;
  int64_t iterations() const { return iterations_; }
  int64_t timed() const { return iterations_ > 1 ? iterations_ - 1 : 0; }  // Over::mean's

  // For checkpoints: every figure by name, numbers that round-trip. from_json throws
  // std::invalid_argument naming `what` and the figure: an unknown name, a non-number;
  // figures it lacks (a schema grown since) start at 0.
  nlohmann::json to_json() const;
  static Tally from_json(const Schema& schema, const nlohmann::json& j, const std::string& what);

 private:
  Values sums_;   // by each metric's rule: the sum after the first, the total, the max, the last
  Values first_;  // the first iteration's
  int64_t iterations_ = 0;
};

// The job's record from every rank's: the value by each metric's Across, and the largest
// rank's figure of every metric.
struct Combined {
  Values value, max;
};

// Every rank's records, the same number on each and of one schema, combined in one allgather
// (collective). Without a group of several ranks: each record as it is.
std::vector<Combined> combine_ranks(const std::vector<Values>& mine, comm::ProcessGroup* pg,
                                    comm::Timeout timeout);

}  // namespace ringflow::apps
