// The node's softirq time, all CPUs together (/proc/stat): where the kernel does most of its
// network work (TCP receive and transmit, a shaped link's timers). That work runs on whatever
// thread it interrupts, so a rank whose node moves gradients over TCP computes more slowly
// by about its share of it; train reports it per iteration beside the communication thread's
// own CPU time (docs/ddp-study.md).
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace ringflow::apps {

// /proc/stat's aggregate "cpu" line, its softirq column (the 7th number, in ticks of
// ticks_per_second); nullopt when the text holds no such line.
std::optional<std::chrono::nanoseconds> softirq_time_from_proc_stat(std::string_view text,
                                                                    long ticks_per_second);

// This node's softirq time so far; zero where /proc/stat cannot be read (not Linux). The
// kernel counts it by sampling at its tick (100 per second per CPU where there is no
// CONFIG_IRQ_TIME_ACCOUNTING), so it is exact only over many ticks.
std::chrono::nanoseconds node_softirq_time();

}  // namespace ringflow::apps
