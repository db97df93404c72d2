#include "ringflow/models/registry.h"

#include <functional>
#include <map>

#include "ringflow/models/inception.h"
#include "ringflow/models/resnet.h"
#include "ringflow/models/small_cnn.h"
#include "ringflow/models/vgg.h"

namespace ringflow::models {

namespace {

struct Entry {
  int64_t default_classes;
  std::vector<int64_t> input;  // (C, H, W)
  std::function<nn::ModulePtr(int64_t, const ModelOptions&)> make;
};

const std::map<std::string, Entry>& registry() {
  static const std::map<std::string, Entry> table = [] {
    std::map<std::string, Entry> t;
    const std::vector<int64_t> mnist{1, 28, 28}, cifar{3, 32, 32}, imagenet{3, 224, 224};
    t["small_cnn"] = {10, mnist, [](int64_t c, const ModelOptions& o) {
                        return std::make_shared<SmallCnn>(c, o.gen);
                      }};
    t["mlp"] = {10, mnist,
                [](int64_t c, const ModelOptions& o) { return std::make_shared<Mlp>(c, o.gen); }};
    for (int depth : {11, 13, 16, 19}) {
      const std::string name = "vgg" + std::to_string(depth);
      t[name + "_cifar"] = {10, cifar, [depth](int64_t c, const ModelOptions& o) {
                              return std::make_shared<Vgg>(depth, Variant::cifar, c, o.gen,
                                                           o.dropout);
                            }};
      t[name] = {1000, imagenet, [depth](int64_t c, const ModelOptions& o) {
                   return std::make_shared<Vgg>(depth, Variant::imagenet, c, o.gen, o.dropout);
                 }};
    }
    for (int depth : {18, 34, 50}) {
      const std::string name = "resnet" + std::to_string(depth);
      t[name + "_cifar"] = {10, cifar, [depth](int64_t c, const ModelOptions& o) {
                              return std::make_shared<ResNet>(depth, Variant::cifar, c, o.gen);
                            }};
      t[name] = {1000, imagenet, [depth](int64_t c, const ModelOptions& o) {
                   return std::make_shared<ResNet>(depth, Variant::imagenet, c, o.gen);
                 }};
    }
    t["inception_v3"] = {1000, {3, 299, 299}, [](int64_t c, const ModelOptions& o) {
                           return std::make_shared<InceptionV3>(c, o.aux_logits, o.gen,
                                                                o.dropout);
                         }};
    return t;
  }();
  return table;
}

const Entry& lookup(const std::string& name) {
  const auto& table = registry();
  const auto it = table.find(name);
  if (it != table.end()) return it->second;
  std::string choices;
  for (const auto& [n, e] : table) choices += (choices.empty() ? "" : ", ") + n;
  throw std::invalid_argument(cat("unknown model '", name, "' (choices: ", choices, ")"));
}

}  // namespace

nn::ModulePtr make_model(const std::string& name, int64_t num_classes,
                         const ModelOptions& options) {
  const Entry& e = lookup(name);
  return e.make(num_classes > 0 ? num_classes : e.default_classes, options);
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [n, e] : registry()) names.push_back(n);
  return names;
}

std::vector<int64_t> model_input_shape(const std::string& name) { return lookup(name).input; }

}  // namespace ringflow::models
