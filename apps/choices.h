// Flags of a fixed set of names (--sync ddp, --precision bf16, --transport shm, ...): each is
// parsed once, at the program's boundary, into its enum by CLI11's CheckedTransformer (case
// insensitive), so that the names are what --help lists, what an error lists and all that is
// accepted; past the flags only the enum travels, into the library's typed options. name_of
// gives a value's name back, for messages and records. The apps and the benchmarks share it.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ringflow::apps {

// A flag's names and the values they stand for, in --help's order.
template <class E>
using Choices = std::vector<std::pair<std::string, E>>;

// The transform of an option of enum type E: add_option("--x", e)->transform(choice_of(t)).
template <class E>
CLI::Validator choice_of(const Choices<E>& choices) {
  std::string list;
  for (const auto& [name, value] : choices) list += (list.empty() ? "{" : ",") + name;
  list += "}";
  const CLI::CheckedTransformer to_enum(choices, CLI::ignore_case);
  return CLI::Validator(
      [=](std::string& s) {
        std::string lower = s;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        const bool named = std::any_of(choices.begin(), choices.end(),
                                       [&](const auto& c) { return c.first == lower; });
        return named ? to_enum(s) : s + " not in " + list;
      },
      list);
}

// The choices of `values` named by the library's own `name` (dtype_name, algorithm_name, ...).
template <class E, size_t N>
Choices<E> choices_from(const E (&values)[N], const char* (*name)(E)) {
  Choices<E> c;
  for (E v : values) c.emplace_back(name(v), v);
  return c;
}

// The name of `value` (the first that names it).
template <class E>
const std::string& name_of(const Choices<E>& choices, E value) {
  for (const auto& [name, v] : choices)
    if (v == value) return name;
  throw std::logic_error("name_of: a value without a name (" + std::to_string(static_cast<int>(value)) + ")");
}

// Adds an option of enum type, parsed by choice_of, its default (value's) named in --help.
template <class E>
CLI::Option* add_choice(CLI::App& app, const std::string& flags, E& value, const Choices<E>& choices,
                        const std::string& help) {
  return app.add_option(flags, value, help)->default_str(name_of(choices, value))
      ->transform(choice_of(choices));
}

}  // namespace ringflow::apps
