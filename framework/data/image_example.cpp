#include "ringflow/framework/data/image_example.h"

namespace ringflow::data {

void read_image_example(std::span<const uint8_t> file, const std::string& name, const ImageTransform& transform,
                        const ImageReadOptions& options, Generator& gen, float* dst) {
  const ImageHeader header = read_image_header(file, name, options.max_image_pixels);
  const CropPlan plan = transform.plan(header.width, header.height, gen);
  const int reduction =
      options.reduce_on_decode && header.format == ImageFormat::jpeg ? ImageTransform::reduction(plan) : 1;
  thread_local DecodedImage image;
  decode_image(file, header, name, image, reduction);
  transform.apply(image, reduction == 1 ? plan : plan.reduced(reduction, image.width, image.height), dst);
}

std::string class_list(const std::vector<std::string>& classes, size_t shown) {
  std::string s;
  for (size_t i = 0; i < classes.size() && i < shown; ++i) s += (i ? ", " : "") + classes[i];
  if (classes.size() > shown) s += ", ... (" + std::to_string(classes.size() - shown) + " more)";
  return s;
}

}  // namespace ringflow::data
