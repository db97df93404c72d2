#include "ringflow/apps/step_metrics.h"

#include <algorithm>

namespace ringflow::apps {

MetricId StepMetrics::phase(const char* name, const char* label) {
  return schema.add({.name = name, .unit = Unit::ms, .label = label, .part_of = "step_ms"});
}

MetricId StepMetrics::sum(const char* name, Unit unit) {
  return schema.add({.name = name, .unit = unit, .over = Over::sum, .across = Across::sum,
                     .records = kNoRecord});
}

MetricId StepMetrics::epoch_total(const char* name, Unit unit, const char* label, Across across) {
  return schema.add({.name = name, .unit = unit, .over = Over::sum, .across = across,
                     .records = kEpochRecord, .label = label, .comm = true});
}

std::function<double(const Values&)> StepMetrics::ratio(MetricId num, MetricId den) {
  return [=](const Values& v) { return v[den] != 0 ? v[num] / v[den] : 0.0; };
}

std::function<double(const Values&)> StepMetrics::rate(MetricId count, MetricId ms) {
  return [=](const Values& v) { return v[ms] > 0 ? v[count] / v[ms] * 1e3 : 0.0; };
}

// 1 - exposed / total: the share of communication that computation hid (0 without any).
std::function<double(const Values&)> StepMetrics::hidden_share(MetricId exposed_ms, MetricId total_ms) {
  return [=](const Values& v) {
    return v[total_ms] > 0 ? std::clamp(1 - v[exposed_ms] / v[total_ms], 0.0, 1.0) : 0.0;
  };
}

const StepMetrics& step_metrics() {
  static const StepMetrics metrics;
  return metrics;
}

}  // namespace ringflow::apps
