#include "ringflow/apps/telemetry.h"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

#include "ringflow/framework/ringflow.h"

namespace ringflow::apps {

const char* unit_name(Unit unit) {
  switch (unit) {
    case Unit::ms: return "ms";
    case Unit::bytes: return "bytes";
    case Unit::ratio: return "ratio";
    case Unit::count: return "count";
    case Unit::per_second: return "1/s";
    case Unit::value: return "";
  }
  return "";
}

MetricId Schema::add(Metric metric) {
  if (metric.name.empty()) throw std::invalid_argument("telemetry: a metric without a name");
  if (find(metric.name))
    throw std::invalid_argument(fmt::format("telemetry: metric '{}' declared twice", metric.name));
  if (metric.across == Across::job && !metric.derive)
    throw std::invalid_argument(fmt::format("telemetry: metric '{}' is derived from the job's "
                                            "figures but has no derivation", metric.name));
  metrics_.push_back(std::move(metric));
  return {metrics_.size() - 1};
}

std::optional<MetricId> Schema::find(std::string_view name) const {
  for (size_t i = 0; i < metrics_.size(); ++i)
    if (metrics_[i].name == name) return MetricId{i};
  return std::nullopt;
}

MetricId Schema::id(std::string_view name) const {
  if (const auto id = find(name)) return *id;
  throw std::invalid_argument(fmt::format("telemetry: no metric '{}'", name));
}

void Values::derive(bool job) {
  const std::vector<Metric>& metrics = schema_->metrics();
  for (size_t i = 0; i < metrics.size(); ++i) {
    const Metric& m = metrics[i];
    if (m.derive && (!job || m.across == Across::job)) v_[i] = m.derive(*this);
  }
}

void Tally::add_iteration(const Values& v) {
  const std::vector<Metric>& metrics = sums_.schema().metrics();
  for (size_t i = 0; i < metrics.size(); ++i) {
    const Metric& m = metrics[i];
    if (m.derive) continue;
    const MetricId id{i};
    switch (m.over) {
      case Over::mean:
        if (iterations_ == 0) first_[id] = v[id];
        else sums_[id] += v[id];
        break;
      case Over::sum: sums_[id] += v[id]; break;
      case Over::max: sums_[id] = iterations_ == 0 ? v[id] : std::max(sums_[id], v[id]); break;
      case Over::last: sums_[id] = v[id]; break;
    }
  }
  ++iterations_;
}

void Tally::add_between(const Values& v) {
  const std::vector<Metric>& metrics = sums_.schema().metrics();
  for (size_t i = 0; i < metrics.size(); ++i)
    if (metrics[i].over == Over::sum && !metrics[i].derive) sums_[MetricId{i}] += v[MetricId{i}];
}

Values Tally::figures() const {
  Values f = sums_;
  const std::vector<Metric>& metrics = f.schema().metrics();
  for (size_t i = 0; i < metrics.size(); ++i) {
    const MetricId id{i};
    if (metrics[i].over == Over::mean)
      f[id] = timed() > 0 ? sums_[id] / static_cast<double>(timed()) : first_[id];
  }
  f.derive();
  return f;
}

nlohmann::json Tally::to_json() const {
  nlohmann::json sums = nlohmann::json::object(), first = nlohmann::json::object();
  const std::vector<Metric>& metrics = sums_.schema().metrics();
  for (size_t i = 0; i < metrics.size(); ++i) {
    if (metrics[i].derive) continue;
    sums[metrics[i].name] = sums_[MetricId{i}];
    if (metrics[i].over == Over::mean) first[metrics[i].name] = first_[MetricId{i}];
  }
  return {{"iterations", iterations_}, {"sums", sums}, {"first", first}};
}

Tally Tally::from_json(const Schema& schema, const nlohmann::json& j, const std::string& what) {
  Tally t(schema);
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("{}: {}", what, why));
  };
  if (!j.is_object() || !j.contains("iterations") || !j["iterations"].is_number_integer() ||
      j["iterations"].get<int64_t>() < 0)
    fail("no count of iterations");
  t.iterations_ = j["iterations"].get<int64_t>();
  for (const auto& [part, values] : {std::pair{"sums", &t.sums_}, std::pair{"first", &t.first_}}) {
    if (!j.contains(part) || !j[part].is_object()) fail(fmt::format("no '{}'", part));
    for (const auto& [name, value] : j[part].items()) {
      const std::optional<MetricId> id = schema.find(name);
      if (!id) fail(fmt::format("'{}' names no figure of this build", name));
      if (!value.is_number()) fail(fmt::format("'{}' is {}, not a number", name, value.dump()));
      (*values)[*id] = value.get<double>();
    }
  }
  return t;
}

namespace {

double combine(Across rule, std::span<const double> ranks) {
  double sum = 0, max = ranks[0];
  for (double x : ranks) {
    sum += x;
    max = std::max(max, x);
  }
  switch (rule) {
    case Across::sum: return sum;
    case Across::max: return max;
    case Across::mean:
    case Across::mean_max:
    case Across::job: return sum / static_cast<double>(ranks.size());
  }
  return sum;
}

}  // namespace

std::vector<Combined> combine_ranks(const std::vector<Values>& mine, comm::ProcessGroup* pg,
                                    comm::Timeout timeout) {
  if (mine.empty()) return {};
  if (!pg || pg->size() == 1) {
    std::vector<Combined> out;
    for (const Values& v : mine) out.push_back({v, v});
    return out;
  }
  // Rank-major: rank r's records at [r * k * n, (r + 1) * k * n), each of n figures.
  const size_t k = mine.size(), world = static_cast<size_t>(pg->size());
  const Schema& schema = mine.front().schema();
  const size_t n = schema.size();
  std::vector<double> flat;
  flat.reserve(k * n);
  for (const Values& v : mine) flat.insert(flat.end(), v.data().begin(), v.data().end());
  const Tensor in = from_vector(flat, {static_cast<int64_t>(k * n)}, DType::f64);
  const Tensor out = zeros({static_cast<int64_t>(world * k * n)}, DType::f64);
  comm::CollectiveOptions o;
  o.timeout = timeout;
  pg->allgather(out, in, o)->wait();
  const std::vector<double> all = out.to_vector<double>();
  std::vector<Combined> combined;
  std::vector<double> ranks(world);
  for (size_t r = 0; r < k; ++r) {
    Combined c{Values(schema), Values(schema)};
    for (size_t i = 0; i < n; ++i) {
      for (size_t q = 0; q < world; ++q) ranks[q] = all[(q * k + r) * n + i];
      c.value[MetricId{i}] = combine(schema.metrics()[i].across, ranks);
      c.max[MetricId{i}] = combine(Across::max, ranks);
    }
    c.value.derive(/*job=*/true);
    combined.push_back(std::move(c));
  }
  return combined;
}

}  // namespace ringflow::apps
