#include "ringflow/framework/data/image_example.h"

namespace ringflow::data {

void read_image_example(std::span<const uint8_t> file, const std::string& name, const ImageTransform& transform,
                        const ImageReadOptions& options, Generator& gen, float* dst) {
  const ImageHeader header = read_image_header(file, name, options.max_image_pixels);
  const CropPlan plan = transform.plan(header.width, header.height, gen);
  const int reduction =
      options.reduce_on_decode && header.format == ImageFormat::jpeg ? ImageTransform::reduction(plan) : 1;
  const CropPlan p = reduction == 1 ? plan
                                    : plan.reduced(reduction, (header.width + reduction - 1) / reduction,
                                                   (header.height + reduction - 1) / reduction);
  const PixelRegion region{p.clip_x0, p.clip_y0, p.clip_x1, p.clip_y1};
  thread_local DecodedImage image;
  decode_image(file, header, name, image, reduction, options.decode_region ? &region : nullptr);
  transform.apply(image, p, dst);
}

std::string class_list(const std::vector<std::string>& classes, size_t shown) {
  std::string s;
  for (size_t i = 0; i < classes.size() && i < shown; ++i) s += (i ? ", " : "") + classes[i];
  if (classes.size() > shown) s += ", ... (" + std::to_string(classes.size() - shown) + " more)";
  return s;
}

}  // namespace ringflow::data
