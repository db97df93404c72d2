// libFuzzer target: the image decoders (framework/data/image_decoder.h: libjpeg-turbo and
// libpng behind them) and the transform after them, on arbitrary bytes: a whole decode, and
// the RandomResizedCrop path (a reduced JPEG, a region of it), under a pixel limit of 2^20.
#include <exception>

#include "ringflow/framework/data/image_example.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringflow::data;
  const std::span<const uint8_t> file(data, size);
  static const ImageTransform crop = ImageTransform::preset("imagenet", /*train=*/true, 16);
  try {
    const ImageHeader header = read_image_header(file, "input", int64_t{1} << 20);
    DecodedImage image;
    decode_image(file, header, "input", image);
    std::vector<float> out(3 * 16 * 16);
    ringflow::Generator gen(size);
    read_image_example(file, "input", crop, {.max_image_pixels = int64_t{1} << 20}, gen, out.data());
  } catch (const std::exception&) {
  }
  return 0;
}
