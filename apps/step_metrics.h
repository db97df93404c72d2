// train's figures, each declared once (apps/telemetry.h): what one rank measures in an
// iteration, how the epoch and the ranks combine it, and where it is reported. The JSON
// lines, the console table, the trace's counters, the checkpoints' epoch sums and
// ringflow-report all follow this list; a new figure is one line here and one where train
// measures it.
#pragma once

#include "ringflow/apps/telemetry.h"

namespace ringflow::apps {

struct StepMetrics {
  Schema schema;
  // The phases of an iteration. forward and backward are compute only; comm is the time the
  // training thread waited for communication (ddp's buffer broadcast and end-of-backward
  // wait, or the reduction after backward of gather-scatter and allreduce, fedavg's rounds).
  MetricId data_ms = phase("data_ms", "data wait");
  MetricId forward_ms = phase("forward_ms", "forward");
  MetricId backward_ms = phase("backward_ms", "backward compute");
  MetricId comm_ms = phase("comm_ms", "comm wait (exposed)");
  MetricId optimizer_ms = phase("optimizer_ms", "optimizer");
  MetricId step_ms = schema.add({.name = "step_ms", .unit = Unit::ms, .label = "iteration",
                                 .epoch_name = "ms_per_iteration"});
  // Communication per iteration: the communication thread's time, the bytes this rank sent
  // and received (counted by the transport), and how much of it backward hid.
  MetricId comm_total_ms = schema.add({.name = "comm_total_ms", .unit = Unit::ms,
                                       .label = "comm total (comm thread)", .comm = true});
  // ... and the CPU time that thread used (ProcessGroup::comm_thread_cpu_time).
  MetricId comm_cpu_ms = schema.add({.name = "comm_cpu_ms", .unit = Unit::ms,
                                     .label = "comm thread cpu", .comm = true});
  // ... and the node's softirq time in it, all CPUs (apps/node_softirq.h): the kernel's network
  // work, done on whichever thread it interrupts, the computation's included.
  MetricId softirq_ms = schema.add({.name = "softirq_ms", .unit = Unit::ms,
                                    .label = "node softirq", .comm = true});
  MetricId bytes_sent = schema.add({.name = "bytes_sent", .unit = Unit::bytes, .label = "sent",
                                    .comm = true});
  MetricId bytes_received = schema.add({.name = "bytes_received", .unit = Unit::bytes,
                                        .label = "received", .comm = true});
  MetricId overlap = schema.add({.name = "overlap", .unit = Unit::ratio,
                                 .label = "overlap (1 - exposed/total)", .comm = true,
                                 .derive = hidden_share(comm_ms, comm_total_ms)});
  // The tensors' memory: the device allocator's peak since the start, in bytes.
  MetricId peak_memory = schema.add({.name = "peak_memory", .unit = Unit::bytes, .over = Over::max,
                                     .label = "peak memory (tensors)"});
  // Images: per iteration (over every rank, the global batch), and per second.
  MetricId images = schema.add({.name = "images", .unit = Unit::count, .across = Across::sum,
                                .records = kNoRecord});
  MetricId images_per_s = schema.add({.name = "images_per_s", .unit = Unit::per_second,
                                      .across = Across::job, .derive = rate(images, step_ms)});
  // Training loss and accuracy: loss is the iteration record's (this rank's mean since the
  // last logged iteration), train_loss the epoch's over its micro-batches.
  MetricId loss = schema.add({.name = "loss", .over = Over::last, .across = Across::mean,
                              .records = kIterationRecord});
  MetricId loss_sum = sum("loss_sum", Unit::value);  // over micro-batches
  MetricId batches = sum("batches", Unit::count);    // micro-batches
  MetricId correct = sum("correct", Unit::count);
  MetricId seen = sum("seen", Unit::count);
  MetricId train_loss = schema.add({.name = "train_loss", .across = Across::job,
                                    .records = kEpochRecord, .derive = ratio(loss_sum, batches)});
  MetricId accuracy = schema.add({.name = "accuracy", .unit = Unit::ratio, .across = Across::job,
                                  .epoch_name = "train_accuracy", .derive = ratio(correct, seen)});
  MetricId lr = schema.add({.name = "lr", .over = Over::last, .across = Across::max});
  // What one rank moved in the whole epoch (every step, the first too, and fedavg's
  // rounds): counted by the transport, and by the closed forms of the collectives it ran.
  MetricId epoch_bytes_sent = epoch_total("epoch_bytes_sent", Unit::bytes, "bytes sent",
                                          Across::mean_max);
  MetricId epoch_bytes_received = epoch_total("epoch_bytes_received", Unit::bytes,
                                              "bytes received", Across::mean_max);
  MetricId epoch_bytes_sent_closed_form = epoch_total(
      "epoch_bytes_sent_closed_form", Unit::bytes, "bytes sent, closed form", Across::mean);
  MetricId epoch_bytes_received_closed_form = epoch_total(
      "epoch_bytes_received_closed_form", Unit::bytes, "bytes received, closed form", Across::mean);
  MetricId rounds = schema.add({.name = "rounds", .unit = Unit::count, .over = Over::sum,
                                .across = Across::mean, .records = kEpochRecord,
                                .label = "model averages", .comm = true, .if_nonzero = true});
  // Optimizer steps skipped for inf/NaN gradients, by fp16's scaler or --on-nonfinite skip
  // (the same on every rank).
  MetricId skipped_steps = schema.add({.name = "skipped_steps", .unit = Unit::count,
                                       .over = Over::sum, .across = Across::max,
                                       .records = kEpochRecord});

 private:
  MetricId phase(const char* name, const char* label);
  MetricId sum(const char* name, Unit unit);
  MetricId epoch_total(const char* name, Unit unit, const char* label, Across across);
  static std::function<double(const Values&)> ratio(MetricId num, MetricId den);
  static std::function<double(const Values&)> rate(MetricId count, MetricId ms);
  static std::function<double(const Values&)> hidden_share(MetricId exposed_ms, MetricId total_ms);
};

// The one instance that train reports by.
const StepMetrics& step_metrics();

}  // namespace ringflow::apps
