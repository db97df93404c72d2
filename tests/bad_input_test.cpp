// Bad input gives exceptions whose messages name what is wrong (shapes, dtypes, dims).
#include "ringflow/framework/printable.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;
using doctest::Contains;

TEST_CASE("mismatched shapes name both shapes") {
  CHECK_THROWS_WITH_AS(add(zeros({2, 3}), zeros({4})), Contains("(2, 3) and (4,)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({4, 5})), Contains("(2, 3) and (4, 5)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3})), Contains("(4, 2, 3, 3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 3, 2, 2}), zeros({4, 3, 3, 3})), Contains("too small"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(linear(zeros({2, 5}), zeros({3, 4})), Contains("(2, 5)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).view({4}), Contains("(4,)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), zeros({3, 3})}, 1), Contains("(3, 3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(max_pool2d(zeros({2, 3}), pool2d_params({2, 2})), Contains("(2, 3)"), std::invalid_argument);
  // A window larger than the padded input, as PyTorch's "Output size is too small".
  CHECK_THROWS_WITH_AS(max_pool2d(zeros({1, 1, 2, 2}), pool2d_params({5, 5})),
                       Contains("is too small for a 5x5 window"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(avg_pool2d(zeros({1, 1, 2, 7}), pool2d_params({3, 3})),
                       Contains("is too small for a 3x3 window"), std::invalid_argument);
  CHECK(max_pool2d(zeros({1, 1, 5, 5}), pool2d_params({5, 5})).shape() == Shape{1, 1, 1, 1});
}

TEST_CASE("mismatched dtypes name both dtypes") {
  CHECK_THROWS_WITH_AS(add(zeros({2}), zeros({2}, DType::f64)), Contains("f32"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(mul(zeros({2}), zeros({2}, DType::f64)), Contains("f64"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}, DType::f64)), Contains("f64"), std::invalid_argument);
}

TEST_CASE("bad dims, labels and backward arguments") {
  CHECK_THROWS_WITH_AS(sum(zeros({2, 3}), {2}), Contains("out of range"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cross_entropy(zeros({2, 3}), from_vector({0, 3}, {2}, DType::i64)),
                       Contains("target[1] = 3"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cross_entropy(zeros({2, 3}), zeros({2})), Contains("i64"), std::invalid_argument);
  Tensor x = zeros({2, 3});
  x.requires_grad_();
  CHECK_THROWS_WITH_AS(mul(x, 2.0).backward(), Contains("(2, 3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(zeros({2}).backward(), Contains("does not require grad"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Device::parse("gpu0"), Contains("gpu0"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Tensor().shape(), Contains("undefined"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(gather(zeros({2, 3}), 1, from_vector({0, 5}, {2, 1}, DType::i64)), Contains("[0, 3)"), std::invalid_argument);
}

TEST_CASE("a tensor whose bytes overflow is refused before anything is allocated") {
  // (2^62) f32 elements fit int64 but their 2^64 bytes do not: no allocation of 0 bytes.
  CHECK_THROWS_WITH_AS(zeros({int64_t{1} << 62}), Contains("(4611686018427387904,) and dtype f32"),
                       std::overflow_error);
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 31, int64_t{1} << 31, 4}, DType::f64), Contains("int64"),
                       std::overflow_error);
}

TEST_CASE("a gradient set by hand must match its tensor's shape, dtype and device") {
  Tensor w = zeros({2, 3});
  w.requires_grad_();
  CHECK_THROWS_WITH_AS(w.set_grad(zeros({3, 2})), Contains("(3, 2)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.set_grad(zeros({2, 3}, DType::f64)), Contains("a f64 gradient on cpu for a f32 tensor"),
                       std::invalid_argument);
  w.set_grad(ones({2, 3}));
  CHECK(sum(w.grad()).item() == 6.0);
}

// What a file holds reaches messages escaped (framework/printable.h): a corrupt header must
// not print raw bytes or terminal escapes; text in valid UTF-8 stays readable.
TEST_CASE("text from files is escaped in messages: control bytes and invalid UTF-8") {
  CHECK(printable("plain text, line 1\nline 2") == "plain text, line 1\nline 2");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
  CHECK(printable("a\x1b[31mred") == "a\\x1b[31mred");
  CHECK(printable(std::string("a\0b\r\t", 5)) == "a\\x00b\\x0d\\x09");
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("x\xc3") == "x\\xc3");                 // a sequence cut short
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");          // an overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  CHECK(printable("\xc2\x85") == "\\xc2\\x85");          // U+0085, a C1 control
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}
