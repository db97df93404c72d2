#include "ringflow/kernels/backend.h"

#include <atomic>
#include <stdexcept>

namespace ringflow {

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::relu: return "relu";
    case UnaryOp::abs: return "abs";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::tanh: return "tanh";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::eq: return "eq";
    case BinaryOp::ne: return "ne";
    case BinaryOp::lt: return "lt";
    case BinaryOp::le: return "le";
    case BinaryOp::gt: return "gt";
    case BinaryOp::ge: return "ge";
    case BinaryOp::relu_backward: return "relu_backward";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::argmax: return "argmax";
  }
  return "?";
}

namespace {
std::atomic<bool> g_allow_tf32{false};
std::atomic<size_t> g_cudnn_workspace_limit{size_t{1} << 30};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

void set_cudnn_workspace_limit(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("set_cudnn_workspace_limit: 0 bytes; want at least 1");
  g_cudnn_workspace_limit.store(bytes);
}
size_t cudnn_workspace_limit() { return g_cudnn_workspace_limit.load(); }

}  // namespace ringflow
