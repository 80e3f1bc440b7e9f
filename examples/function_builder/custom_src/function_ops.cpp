// The seed's function_ops.cpp (MindSpore r2.6 "CustomOpBuilder: Develop Forward and Backward
// Operators with the Function Interface"), for hyb on the CPU.
//
// Differences from the seed: the header is hyb_extension.h and the namespace hyb::autograd
// (the seed: ms_extension.h, mindspore::pynative::autograd); the module name macro is
// HYB_EXTENSION_NAME (MS_EXTENSION_NAME also works); and the Ascend-only
// custom::CustomLaunchAclnn("aclnnMul", {a, b}, {out}) is replaced by LaunchMul(a, b, out), an
// elementwise multiply loop with NumPy's broadcasting.  Forward, Backward and the binding are
// the seed's.
#include <string>
#include "hyb_extension.h"

namespace hyb {
namespace autograd {
ShapeVector BroadcastInferShape(const BaseTensorPtr &t1, const BaseTensorPtr &t2) {
  ShapeVector s1 = t1->shape();
  ShapeVector s2 = t2->shape();
  ShapeVector out_shape(std::max(s1.size(), s2.size()), 1LL);
  if (out_shape.empty()) {
    return out_shape;
  }
  for (size_t i = out_shape.size(); i > 0; i--) {
    if (i <= s1.size() && s1[s1.size() - i] > 1) {
      out_shape[out_shape.size() - i] = s1[s1.size() - i];
    } else if (i <= s2.size() && s2[s2.size() - i] > 1) {
      out_shape[out_shape.size() - i] = s2[s2.size() - i];
    }
  }
  return out_shape;
}

// Element strides of t inside a tensor of shape `shape` it broadcasts to (0 along broadcast axes).
static std::vector<int64_t> BroadcastStrides(const BaseTensorPtr &t, const ShapeVector &shape) {
  const ShapeVector &s = t->shape();
  std::vector<int64_t> strides(shape.size(), 0);
  int64_t step = 1;
  for (size_t k = 1; k <= s.size(); k++) {
    int64_t n = s[s.size() - k];
    if (n != 1) {
      if (n != shape[shape.size() - k]) {
        throw std::invalid_argument("mul: the shapes do not broadcast");
      }
      strides[shape.size() - k] = step;
    }
    step *= n;
  }
  return strides;
}

template <typename T>
static void MulLoop(const BaseTensorPtr &a, const BaseTensorPtr &b, const BaseTensorPtr &out) {
  const ShapeVector &shape = out->shape();
  const T *pa = a->data<T>();
  const T *pb = b->data<T>();
  T *po = out->data<T>();
  std::vector<int64_t> sa = BroadcastStrides(a, shape), sb = BroadcastStrides(b, shape);
  std::vector<int64_t> index(shape.size(), 0);
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0, n = out->numel(); i < n; i++) {
    po[i] = pa[ia] * pb[ib];
    for (size_t d = shape.size(); d > 0; d--) {       // the next index, last axis fastest
      size_t k = d - 1;
      ia += sa[k];
      ib += sb[k];
      if (++index[k] < shape[k]) break;
      ia -= sa[k] * shape[k];
      ib -= sb[k] * shape[k];
      index[k] = 0;
    }
  }
}

// out = a * b, elementwise with broadcasting (in place of aclnnMul).
static void LaunchMul(const BaseTensorPtr &a, const BaseTensorPtr &b, const BaseTensorPtr &out) {
  if (a->data_type() != b->data_type() || a->data_type() != out->data_type()) {
    throw std::invalid_argument(std::string("mul: the inputs have different dtypes: ") + TypeIdName(a->data_type()) +
                                " and " + TypeIdName(b->data_type()));
  }
  switch (a->data_type()) {
    case kNumberTypeFloat32: return MulLoop<float>(a, b, out);
    case kNumberTypeFloat64: return MulLoop<double>(a, b, out);
    case kNumberTypeInt32: return MulLoop<int32_t>(a, b, out);
    case kNumberTypeInt64: return MulLoop<int64_t>(a, b, out);
    default: throw std::invalid_argument(std::string("mul: unsupported dtype ") + TypeIdName(a->data_type()));
  }
}

class CustomMul : public Function<CustomMul> {
 public:
  static BaseTensorPtr Forward(AutogradContext *ctx, const BaseTensorPtr &x, const BaseTensorPtr &y) {
    auto output = std::make_shared<BaseTensor>(x->data_type(), BroadcastInferShape(x, y));
    LaunchMul(x, y, output);
    bool x_require_grad = ctx->NeedGrad(x);
    bool y_require_grad = ctx->NeedGrad(y);
    if (x_require_grad || y_require_grad) {
      ctx->SaveForBackward({x_require_grad ? y : nullptr, y_require_grad ? x : nullptr});
    }
    return output;
  }

  static BaseTensorPtrList Backward(AutogradContext *ctx, BaseTensorPtrList grad_outputs) {
    auto saved = ctx->GetSavedTensors();
    auto dout = grad_outputs[0];

    BaseTensorPtr grad_x = nullptr;
    BaseTensorPtr grad_y = nullptr;

    if (ctx->NeedsInputGrad(0)) {
      grad_x = std::make_shared<BaseTensor>(dout->data_type(), BroadcastInferShape(dout, saved[0]));
      LaunchMul(dout, saved[0], grad_x);
    }
    if (ctx->NeedsInputGrad(1)) {
      grad_y = std::make_shared<BaseTensor>(dout->data_type(), BroadcastInferShape(dout, saved[1]));
      LaunchMul(dout, saved[1], grad_y);
    }

    return {grad_x, grad_y};
  }
};

BaseTensorPtr run_custom_mul(const tensor::BaseTensorPtr &x, const tensor::BaseTensorPtr &y) {
  return CustomMul::Apply(x, y);
}

}  // namespace autograd
}  // namespace hyb

PYBIND11_MODULE(HYB_EXTENSION_NAME, m) {
  m.def("mul", &hyb::autograd::run_custom_mul, "Calculate the value x multiplied by y.");
}
