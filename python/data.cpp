// ringflow.data: the data sets (Fashion-MNIST, MNIST, CIFAR-10, synthetic, subsets, and
// TensorDataset over tensors made in Python), transforms, samplers (DistributedSampler among
// them) and the DataLoader, whose worker threads build batches while Python holds the GIL
// elsewhere: taking a batch releases it.
//
// As torch.utils.data's, with two differences that come from the C++ loader: transforms are
// given to the DataLoader (applied per example in the batch's memory), and an epoch's order
// is a function of (seed, epoch): iterating a loader runs epoch 0, 1, 2, ... in turn, and
// set_epoch(n) (or loader.epoch(n)) picks one, as DistributedSampler.set_epoch does.
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/data/data.h"

namespace ringflow::python {
namespace {

// Examples held in two tensors: images (N, ...) as f32 and labels (N) as i64, on the cpu.
class TensorDataset : public data::Dataset {
 public:
  TensorDataset(const Tensor& images, const Tensor& labels)
      : images_(images.to(Device::cpu()).to(DType::f32).contiguous()),
        labels_(labels.to(Device::cpu()).to(DType::i64).contiguous()) {
    RF_CHECK(images_.dim() >= 1 && labels_.dim() == 1 && labels_.size(0) == images_.size(0),
             "TensorDataset: images (N, ...) and labels (N), got shapes ", shape_str(images_.shape()),
             " and ", shape_str(labels_.shape()));
    const int64_t* l = labels_.data<int64_t>();
    for (int64_t i = 0; i < labels_.numel(); ++i) {
      RF_CHECK(l[i] >= 0, "TensorDataset: label ", l[i], " of example ", i, " is negative");
      classes_ = std::max(classes_, l[i] + 1);
    }
  }
  int64_t size() const override { return labels_.numel(); }
  Shape image_shape() const override { return Shape(images_.shape().begin() + 1, images_.shape().end()); }
  int64_t num_classes() const override { return classes_; }
  int64_t read(int64_t i, float* dst) const override {
    const int64_t n = image_numel();
    std::memcpy(dst, images_.data<float>() + i * n, static_cast<size_t>(n) * sizeof(float));
    return labels_.data<int64_t>()[i];
  }
  int64_t label(int64_t i) const override { return labels_.data<int64_t>()[i]; }

 private:
  Tensor images_, labels_;
  int64_t classes_ = 0;
};

using DatasetPtr = std::shared_ptr<data::Dataset>;

void bind_datasets(py::module_& m) {
  py::class_<data::Dataset, DatasetPtr>(m, "Dataset")
      .def("__len__", &data::Dataset::size)
      .def("__getitem__", [](const data::Dataset& d, int64_t i) {
        const int64_t n = d.size();
        if (i < -n || i >= n) throw py::index_error("index " + std::to_string(i) + " out of range for " + std::to_string(n) + " examples");
        py::gil_scoped_release release;
        const data::Example e = d.get(i < 0 ? i + n : i);
        return std::make_pair(e.image, e.label);
      })
      .def_property_readonly("image_shape", &data::Dataset::image_shape)
      .def_property_readonly("num_classes", &data::Dataset::num_classes);
  py::class_<data::Mnist, data::Dataset, std::shared_ptr<data::Mnist>>(m, "MNIST")
      .def(py::init(&data::Mnist::open), py::arg("root"), py::arg("train") = true, release_gil());
  m.attr("FASHION_MNIST_DIR") = data::kFashionMnistDir;
  m.def("FashionMNIST", [](std::optional<std::string> root, bool train) {
    return data::Mnist::open(root.value_or(data::kFashionMnistDir), train);
  }, py::arg("root") = py::none(), py::arg("train") = true, release_gil(),
     "Fashion-MNIST's IDX files in root (default: Debian's dataset-fashion-mnist folder).");
  py::class_<data::Cifar10, data::Dataset, std::shared_ptr<data::Cifar10>>(m, "CIFAR10")
      .def(py::init([](const std::string& root, bool train) { return data::Cifar10::open(root, train); }),
           py::arg("root"), py::arg("train") = true, release_gil());
  py::class_<data::SyntheticDataset, data::Dataset, std::shared_ptr<data::SyntheticDataset>>(m, "SyntheticDataset")
      .def(py::init([](int64_t size, Shape shape, int64_t classes, uint64_t seed, int64_t distinct) {
             return std::make_shared<data::SyntheticDataset>(data::SyntheticOptions{size, shape, classes, seed, distinct});
           }),
           py::arg("size") = 1024, py::arg("image_shape") = Shape{3, 32, 32}, py::arg("num_classes") = 10,
           py::arg("seed") = 0, py::arg("distinct") = 256);
  py::class_<data::Subset, data::Dataset, std::shared_ptr<data::Subset>>(m, "Subset")
      .def(py::init([](DatasetPtr base, std::vector<int64_t> indices) {
             for (int64_t i : indices)
               RF_CHECK(i >= 0 && i < base->size(), "Subset: index ", i, " outside the ", base->size(), " examples");
             return std::make_shared<data::Subset>(std::move(base), std::move(indices));
           }),
           py::arg("dataset"), py::arg("indices"));
  py::class_<TensorDataset, data::Dataset, std::shared_ptr<TensorDataset>>(m, "TensorDataset")
      .def(py::init([](const py::object& images, const py::object& labels) {
             return std::make_shared<TensorDataset>(as_tensor(images), as_tensor(labels));
           }),
           py::arg("images"), py::arg("labels"));
}

// transforms.RandomCrop(size, padding): ringflow's crops to the image's own size, which size
// must equal (checked when a DataLoader gets it).
class SizedRandomCrop : public data::RandomCrop {
 public:
  SizedRandomCrop(std::array<int64_t, 2> size, int64_t padding) : data::RandomCrop(padding), size_(size) {}
  std::array<int64_t, 2> size() const { return size_; }

 private:
  std::array<int64_t, 2> size_;
};

using TransformPtr = std::shared_ptr<data::Transform>;

void bind_transforms(py::module_& data) {
  py::module_ m = data.def_submodule("transforms", "Per-example transforms, applied by a DataLoader.");
  py::class_<data::Transform, TransformPtr>(m, "Transform");
  py::class_<data::Normalize, data::Transform, std::shared_ptr<data::Normalize>>(m, "Normalize")
      .def(py::init<std::vector<float>, std::vector<float>>(), py::arg("mean"), py::arg("std"));
  py::class_<SizedRandomCrop, data::Transform, std::shared_ptr<SizedRandomCrop>>(m, "RandomCrop")
      .def(py::init([](const IntOrPair& size, int64_t padding) {
             return std::make_shared<SizedRandomCrop>(pair_of(size, "size"), padding);
           }),
           py::arg("size"), py::arg("padding") = 0);
  py::class_<data::RandomHorizontalFlip, data::Transform, std::shared_ptr<data::RandomHorizontalFlip>>(
      m, "RandomHorizontalFlip")
      .def(py::init<double>(), py::arg("p") = 0.5);
  m.def("Compose", [](const std::vector<TransformPtr>& transforms) { return transforms; },
        py::arg("transforms"), "The transforms in order (a list, as DataLoader's transforms= takes).");
}

void bind_samplers(py::module_& m) {
  using SamplerPtr = std::shared_ptr<data::Sampler>;
  py::class_<data::Sampler, SamplerPtr>(m, "Sampler")
      .def("__len__", &data::Sampler::size)
      .def("indices", &data::Sampler::indices, py::arg("epoch") = 0, "The indices of one epoch, in order.");
  py::class_<data::SequentialSampler, data::Sampler, std::shared_ptr<data::SequentialSampler>>(m, "SequentialSampler")
      .def(py::init([](const data::Dataset& d) { return std::make_shared<data::SequentialSampler>(d.size()); }),
           py::arg("data_source"));
  py::class_<data::RandomSampler, data::Sampler, std::shared_ptr<data::RandomSampler>>(m, "RandomSampler")
      .def(py::init([](const data::Dataset& d, uint64_t seed) { return std::make_shared<data::RandomSampler>(d.size(), seed); }),
           py::arg("data_source"), py::arg("seed") = 0);
  py::class_<data::DistributedSampler, data::Sampler, std::shared_ptr<data::DistributedSampler>>(m, "DistributedSampler")
      .def(py::init([](const data::Dataset& d, std::optional<int64_t> replicas, std::optional<int64_t> rank,
                       bool shuffle, uint64_t seed, bool drop_last) {
             // Unset: the default process group's (ringflow.distributed.init_process_group).
             const py::module_ dist = py::module_::import("ringflow").attr("distributed");
             const int64_t world = replicas ? *replicas : dist.attr("get_world_size")().cast<int64_t>();
             const int64_t r = rank ? *rank : dist.attr("get_rank")().cast<int64_t>();
             return std::make_shared<data::DistributedSampler>(d.size(), world, r,
                                                               data::DistributedSamplerOptions{shuffle, seed, drop_last});
           }),
           py::arg("dataset"), py::arg("num_replicas") = py::none(), py::arg("rank") = py::none(),
           py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("drop_last") = false);
}

struct Loader {
  std::unique_ptr<data::DataLoader> loader;
  int64_t next_epoch = 0;
};

// One epoch's batches as (images, labels); the loader (kept alive) runs one epoch at a time.
struct EpochIterator {
  py::object owner;
  data::DataLoader* loader;
  bool done = false;
};

EpochIterator start(const py::object& self, int64_t epoch) {
  auto& l = self.cast<Loader&>();
  {
    py::gil_scoped_release release;
    l.loader->start_epoch(epoch);
  }
  l.next_epoch = epoch + 1;
  return EpochIterator{self, l.loader.get()};
}

void check_crop_sizes(const data::Dataset& d, const std::vector<TransformPtr>& transforms) {
  const Shape shape = d.image_shape();
  for (const TransformPtr& t : transforms) {
    const auto* crop = dynamic_cast<const SizedRandomCrop*>(t.get());
    if (!crop || shape.size() < 2) continue;
    const std::array<int64_t, 2> hw{shape[shape.size() - 2], shape[shape.size() - 1]};
    RF_CHECK(crop->size() == hw, "RandomCrop(size=(", crop->size()[0], ", ", crop->size()[1],
             ")) on images of ", hw[0], "x", hw[1], ": ringflow's crop keeps the image's size");
  }
}

void bind_loader(py::module_& m) {
  py::class_<EpochIterator>(m, "_EpochIterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", [](EpochIterator& it) {
        data::Batch batch;
        bool more = false;
        if (!it.done) {
          py::gil_scoped_release release;
          more = it.loader->next(batch);
        }
        if (!more) {
          it.done = true;
          throw py::stop_iteration();
        }
        return std::make_pair(batch.images, batch.labels);
      });
  py::class_<Loader>(m, "DataLoader")
      .def(py::init([](DatasetPtr dataset, int64_t batch_size, bool shuffle, std::shared_ptr<data::Sampler> sampler,
                       int num_workers, bool drop_last, uint64_t seed, std::optional<std::vector<TransformPtr>> transforms,
                       int prefetch_factor) {
             std::vector<std::shared_ptr<const data::Transform>> list;
             if (transforms) {
               check_crop_sizes(*dataset, *transforms);
               list.assign(transforms->begin(), transforms->end());
             }
             data::DataLoaderOptions o{batch_size, shuffle, drop_last, seed, num_workers,
                                       std::max(1, prefetch_factor) * std::max(1, num_workers), list, sampler};
             return Loader{std::make_unique<data::DataLoader>(dataset, o)};
           }),
           py::arg("dataset"), py::arg("batch_size") = 1, py::arg("shuffle") = false,
           py::arg("sampler") = py::none(), py::arg("num_workers") = 0, py::arg("drop_last") = false,
           py::arg("seed") = 0, py::arg("transforms") = py::none(), py::arg("prefetch_factor") = 2)
      .def("__len__", [](const Loader& l) { return l.loader->num_batches(); })
      .def("__iter__", [](const py::object& self) { return start(self, self.cast<Loader&>().next_epoch); })
      .def("epoch", &start, py::arg("epoch"), "The batches of epoch `epoch` (its order and transforms).")
      .def("set_epoch", [](Loader& l, int64_t epoch) { l.next_epoch = epoch; }, py::arg("epoch"))
      .def_property_readonly("dataset", [](const Loader& l) { return &l.loader->dataset(); },
                             py::return_value_policy::reference_internal)
      .def_property_readonly("batch_size", [](const Loader& l) { return l.loader->options().batch_size; });
}

}  // namespace

void bind_data(py::module_& data) {
  bind_datasets(data);
  bind_transforms(data);
  bind_samplers(data);
  bind_loader(data);
}

}  // namespace ringflow::python
