// hyb_extension.h: C++ operators with forward and backward written together, for hyb.
//
// The CPU counterpart of MindSpore's ms_extension.h (the Function interface of
// CustomOpBuilder).  A source built by hyb.ops.CustomOpBuilder includes this header:
//
//   #include "hyb_extension.h"
//   namespace hyb {
//   class CustomMul : public Function<CustomMul> {
//    public:
//     static BaseTensorPtr Forward(AutogradContext *ctx, const BaseTensorPtr &x, const BaseTensorPtr &y);
//     static BaseTensorPtrList Backward(AutogradContext *ctx, BaseTensorPtrList grad_outputs);
//   };
//   }
//   PYBIND11_MODULE(HYB_EXTENSION_NAME, m) { m.def("mul", &hyb::CustomMul::Apply<...>); }
//
// Python values convert to BaseTensorPtr and back on their own: a hyb.Tensor (or Parameter) or
// a NumPy array arrives as a BaseTensor sharing its memory (do not write into inputs), a Python
// number as a 0-d tensor (floats float32, ints int64, as hyb.Tensor(2.0)), None as nullptr; a
// BaseTensorPtr returned to Python becomes a hyb.Tensor that owns the memory (no copy), nullptr
// None.  Function<T>::Apply runs T::Forward with hyb's tape switched off and, when an input
// takes part in a gradient (hyb.grad, value_and_grad, GradOperation, a Parameter), records the
// call on the tape with a backward that calls T::Backward.
//
// Names follow MindSpore's (BaseTensor, BaseTensorPtr, BaseTensorPtrList, ShapeVector, TypeId,
// Function, AutogradContext), in namespace hyb (also hyb::tensor for tensor::BaseTensorPtr).
// Everything here runs with the GIL held: call it from Python, not from threads you start
// (plain loops over data<T>() in threads are fine).
#ifndef HYB_EXTENSION_H_
#define HYB_EXTENSION_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <any>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// The module name: CustomOpBuilder defines it (-DHYB_EXTENSION_NAME=<name>), to be used as
// PYBIND11_MODULE(HYB_EXTENSION_NAME, m).  MS_EXTENSION_NAME is the same, for ported sources.
#ifndef HYB_EXTENSION_NAME
#define HYB_EXTENSION_NAME hyb_extension
#endif
#ifndef MS_EXTENSION_NAME
#define MS_EXTENSION_NAME HYB_EXTENSION_NAME
#endif

namespace hyb {

namespace py = pybind11;

using ShapeVector = std::vector<int64_t>;

// Element types (MindSpore's TypeId names).
enum TypeId : int {
  kTypeUnknown = 0,
  kNumberTypeBool,
  kNumberTypeInt8,
  kNumberTypeInt16,
  kNumberTypeInt32,
  kNumberTypeInt64,
  kNumberTypeUInt8,
  kNumberTypeUInt16,
  kNumberTypeUInt32,
  kNumberTypeUInt64,
  kNumberTypeFloat16,
  kNumberTypeFloat32,
  kNumberTypeFloat64,
  kNumberTypeBFloat16,  // ml_dtypes.bfloat16 (NumPy has no bfloat16 of its own)
};

// Bytes per element.
inline size_t TypeIdSize(TypeId t) {
  switch (t) {
    case kNumberTypeBool: case kNumberTypeInt8: case kNumberTypeUInt8: return 1;
    case kNumberTypeInt16: case kNumberTypeUInt16: case kNumberTypeFloat16: case kNumberTypeBFloat16: return 2;
    case kNumberTypeInt32: case kNumberTypeUInt32: case kNumberTypeFloat32: return 4;
    case kNumberTypeInt64: case kNumberTypeUInt64: case kNumberTypeFloat64: return 8;
    default: throw std::invalid_argument("hyb: unknown TypeId");
  }
}

// NumPy's name of the type ("float32", ...).
inline const char *TypeIdName(TypeId t) {
  switch (t) {
    case kNumberTypeBool: return "bool";
    case kNumberTypeInt8: return "int8";
    case kNumberTypeInt16: return "int16";
    case kNumberTypeInt32: return "int32";
    case kNumberTypeInt64: return "int64";
    case kNumberTypeUInt8: return "uint8";
    case kNumberTypeUInt16: return "uint16";
    case kNumberTypeUInt32: return "uint32";
    case kNumberTypeUInt64: return "uint64";
    case kNumberTypeFloat16: return "float16";
    case kNumberTypeFloat32: return "float32";
    case kNumberTypeFloat64: return "float64";
    case kNumberTypeBFloat16: return "bfloat16";
    default: return "unknown";
  }
}

// The TypeId of a C++ element type (float16 and bfloat16 data are read as uint16_t).
template <typename T> struct TypeIdOf { static constexpr TypeId value = kTypeUnknown; };
template <> struct TypeIdOf<bool> { static constexpr TypeId value = kNumberTypeBool; };
template <> struct TypeIdOf<int8_t> { static constexpr TypeId value = kNumberTypeInt8; };
template <> struct TypeIdOf<int16_t> { static constexpr TypeId value = kNumberTypeInt16; };
template <> struct TypeIdOf<int32_t> { static constexpr TypeId value = kNumberTypeInt32; };
template <> struct TypeIdOf<int64_t> { static constexpr TypeId value = kNumberTypeInt64; };
template <> struct TypeIdOf<uint8_t> { static constexpr TypeId value = kNumberTypeUInt8; };
template <> struct TypeIdOf<uint16_t> { static constexpr TypeId value = kNumberTypeUInt16; };
template <> struct TypeIdOf<uint32_t> { static constexpr TypeId value = kNumberTypeUInt32; };
template <> struct TypeIdOf<uint64_t> { static constexpr TypeId value = kNumberTypeUInt64; };
template <> struct TypeIdOf<float> { static constexpr TypeId value = kNumberTypeFloat32; };
template <> struct TypeIdOf<double> { static constexpr TypeId value = kNumberTypeFloat64; };

namespace detail {

// A strong reference to a Python object that may be dropped without the GIL.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(PyObject *o) : obj_(o) { Py_XINCREF(obj_); }
  PyRef(const PyRef &o) : PyRef(o.obj_) {}
  PyRef &operator=(const PyRef &o) {
    if (this != &o) { reset(); obj_ = o.obj_; Py_XINCREF(obj_); }
    return *this;
  }
  ~PyRef() { reset(); }
  void reset() {
    if (obj_ != nullptr && Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_DECREF(obj_);
    }
    obj_ = nullptr;
  }
  PyObject *get() const { return obj_; }
  explicit operator bool() const { return obj_ != nullptr; }

 private:
  PyObject *obj_ = nullptr;
};

inline py::module_ bridge() { return py::module_::import("hyb.function"); }

}  // namespace detail

// A dense, C-contiguous tensor on the CPU.  make_shared<BaseTensor>(dtype, shape) allocates
// zeroed memory; returned to Python the memory belongs to the hyb.Tensor made from it.
class BaseTensor {
 public:
  BaseTensor(TypeId dtype, const ShapeVector &shape) : dtype_(dtype), shape_(shape) {
    CheckShape();
    size_t bytes = std::max<size_t>(1, numel() * TypeIdSize(dtype));
    void *p = std::calloc(bytes, 1);
    if (p == nullptr) throw std::bad_alloc();
    storage_ = std::shared_ptr<void>(p, std::free);
    data_ = p;
  }

  // A view of memory kept alive by `owner` (used for tensors that come from Python).
  BaseTensor(TypeId dtype, const ShapeVector &shape, void *data, std::shared_ptr<void> owner)
      : dtype_(dtype), shape_(shape), data_(data), storage_(std::move(owner)) {
    CheckShape();
  }

  const ShapeVector &shape() const { return shape_; }
  TypeId data_type() const { return dtype_; }
  TypeId Dtype() const { return dtype_; }
  size_t ndim() const { return shape_.size(); }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape_) n *= d;
    return n;
  }
  int64_t ElementsNum() const { return numel(); }
  int64_t DataSize() const { return numel(); }
  size_t itemsize() const { return TypeIdSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  size_t Size() const { return nbytes(); }
  void *data_c() const { return data_; }

  // The elements as T*; T must be the element type (uint16_t for float16 and bfloat16).
  template <typename T>
  T *data() const {
    constexpr TypeId want = TypeIdOf<std::remove_cv_t<T>>::value;
    bool half = dtype_ == kNumberTypeFloat16 || dtype_ == kNumberTypeBFloat16;
    bool ok = want == dtype_ || (half && std::is_same_v<std::remove_cv_t<T>, uint16_t>) ||
              (want == kTypeUnknown && sizeof(T) == itemsize());
    if (!ok) {
      throw std::invalid_argument(std::string("hyb: BaseTensor::data<T>() with the wrong T: the tensor holds ") +
                                  TypeIdName(dtype_));
    }
    return static_cast<T *>(data_);
  }

  const std::shared_ptr<void> &storage() const { return storage_; }

  // The Python side (used by the conversions and Function<T>::Apply).
  const detail::PyRef &source() const { return source_; }
  void set_source(PyObject *t) { source_ = detail::PyRef(t); }
  void set_python(PyObject *t) { python_ = detail::PyRef(t); }
  detail::PyRef take_python() {
    detail::PyRef r = python_;
    python_.reset();
    return r;
  }
  const detail::PyRef &python_weak() const { return python_weak_; }
  void set_python_weak(PyObject *w) { python_weak_ = detail::PyRef(w); }

 private:
  void CheckShape() const {
    for (auto d : shape_) {
      if (d < 0) throw std::invalid_argument("hyb: a BaseTensor's shape has a negative dimension");
    }
  }

  TypeId dtype_;
  ShapeVector shape_;
  void *data_ = nullptr;
  std::shared_ptr<void> storage_;
  detail::PyRef source_;       // the hyb.Tensor this tensor was made from (inputs)
  detail::PyRef python_;       // the hyb.Tensor made for it by Apply, until it is returned
  detail::PyRef python_weak_;  // a weak reference to that Tensor afterwards
};

using BaseTensorPtr = std::shared_ptr<BaseTensor>;
using BaseTensorPtrList = std::vector<BaseTensorPtr>;

namespace tensor {
using hyb::BaseTensor;
using hyb::BaseTensorPtr;
using hyb::BaseTensorPtrList;
}  // namespace tensor

namespace detail {

// The TypeId of NumPy's dtype name (names, not descriptor fields: their layout changed in NumPy 2).
inline TypeId TypeIdOfName(const std::string &name) {
  static const char *names[] = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                "uint32", "uint64", "float16", "float32", "float64", "bfloat16"};
  for (int t = kNumberTypeBool; t <= kNumberTypeBFloat16; t++) {
    if (name == names[t - kNumberTypeBool]) return static_cast<TypeId>(t);
  }
  return kTypeUnknown;
}

// A Python value (hyb.Tensor, NumPy array, number) as a BaseTensor sharing its memory; nullptr
// when it is none of these.
inline BaseTensorPtr FromPython(py::handle value) {
  py::object got = bridge().attr("_cpp_input")(value);
  if (got.is_none()) return nullptr;
  auto triple = got.cast<py::tuple>();
  py::array arr = triple[1].cast<py::array>();
  TypeId t = TypeIdOfName(triple[2].cast<std::string>());
  if (t == kTypeUnknown) return nullptr;
  ShapeVector shape(arr.shape(), arr.shape() + arr.ndim());
  PyObject *owner = arr.ptr();
  Py_INCREF(owner);
  std::shared_ptr<void> keep(static_cast<void *>(owner), [](void *o) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_DECREF(static_cast<PyObject *>(o));
    }
  });
  auto result = std::make_shared<BaseTensor>(t, shape, const_cast<void *>(arr.data()), std::move(keep));
  if (!triple[0].is_none()) result->set_source(triple[0].ptr());
  return result;
}

// A NumPy array over the tensor's memory, which it keeps alive.
inline py::array ToArray(const BaseTensorPtr &t) {
  auto *keep = new std::shared_ptr<void>(t->storage());
  py::capsule owner(keep, [](void *p) { delete static_cast<std::shared_ptr<void> *>(p); });
  std::vector<py::ssize_t> shape(t->shape().begin(), t->shape().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t step = static_cast<py::ssize_t>(t->itemsize());
  for (size_t i = shape.size(); i > 0; i--) {
    strides[i - 1] = step;
    step *= std::max<py::ssize_t>(shape[i - 1], 1);
  }
  return py::array(py::dtype(TypeIdName(t->data_type())), shape, strides, t->data_c(), owner);
}

// A new hyb.Tensor owning (a reference to) the tensor's memory.
inline py::object NewPythonTensor(const BaseTensorPtr &t) { return bridge().attr("_cpp_wrap")(ToArray(t)); }

// The hyb.Tensor for a BaseTensor going back to Python: the one Apply recorded, else a new one.
inline py::object ToPython(const BaseTensorPtr &t) {
  if (!t) return py::none();
  detail::PyRef held = t->take_python();
  if (held) {
    py::object obj = py::reinterpret_borrow<py::object>(held.get());
    PyObject *w = PyWeakref_NewRef(obj.ptr(), nullptr);
    if (w != nullptr) {
      t->set_python_weak(w);
      Py_DECREF(w);
    } else {
      PyErr_Clear();
    }
    return obj;
  }
  if (t->python_weak()) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *alive = nullptr;
    if (PyWeakref_GetRef(t->python_weak().get(), &alive) > 0) return py::reinterpret_steal<py::object>(alive);
    PyErr_Clear();
#else
    PyObject *alive = PyWeakref_GetObject(t->python_weak().get());
    if (alive != nullptr && alive != Py_None) return py::reinterpret_borrow<py::object>(alive);
#endif
  }
  return NewPythonTensor(t);
}

}  // namespace detail

// What Forward passes to Backward.
class AutogradContext {
 public:
  // Keep tensors (nullptr allowed) for Backward.
  void SaveForBackward(const BaseTensorPtrList &tensors) { saved_ = tensors; }
  BaseTensorPtrList GetSavedTensors() const { return saved_; }

  // Whether `tensor` (an argument of Forward) needs a gradient.
  bool NeedGrad(const BaseTensorPtr &tensor) const {
    if (!tensor) return false;
    for (size_t i = 0; i < inputs_.size(); i++) {
      const auto &x = inputs_[i];
      if (!x) continue;
      if (x == tensor || (x->source() && x->source().get() == tensor->source().get())) {
        return needs_input_grad_[i];
      }
    }
    return false;
  }
  // Whether argument i of Forward (counting from 0, after ctx) needs a gradient.
  bool NeedsInputGrad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  const std::vector<bool> &needs_input_grad() const { return needs_input_grad_; }

  // Other values Forward wants to hand to Backward: ctx->saved_data["alpha"] = 2.0;
  std::map<std::string, std::any> saved_data;

  // Used by Function<T>::Apply.
  void AddInput(const BaseTensorPtr &t, bool need) {
    inputs_.push_back(t);
    needs_input_grad_.push_back(need);
  }

 private:
  BaseTensorPtrList saved_;
  BaseTensorPtrList inputs_;
  std::vector<bool> needs_input_grad_;
};

namespace detail {

// hyb.autograd.no_grad() for the duration of a scope.
class NoGradGuard {
 public:
  NoGradGuard() : cm_(py::module_::import("hyb.autograd").attr("no_grad")()) { cm_.attr("__enter__")(); }
  ~NoGradGuard() {
    try {
      cm_.attr("__exit__")(py::none(), py::none(), py::none());
    } catch (...) {
    }
  }
  NoGradGuard(const NoGradGuard &) = delete;
  NoGradGuard &operator=(const NoGradGuard &) = delete;

 private:
  py::object cm_;
};

inline BaseTensorPtrList AsList(const BaseTensorPtr &t) { return {t}; }
inline BaseTensorPtrList AsList(const BaseTensorPtrList &l) { return l; }

template <typename A>
void CollectInput(AutogradContext &ctx, py::list &sources, std::vector<int> &positions, const A &arg) {
  if constexpr (std::is_same_v<std::decay_t<A>, BaseTensorPtr>) {
    bool need = false;
    if (arg && arg->source()) {
      py::handle src(arg->source().get());
      need = bridge().attr("_cpp_needs_grad")(src).template cast<bool>();
      sources.append(src);
    } else {
      sources.append(py::none());
    }
    positions.push_back(static_cast<int>(ctx.needs_input_grad().size()));
    ctx.AddInput(arg, need);
  } else {
    sources.append(py::none());
    ctx.AddInput(nullptr, false);
  }
}

inline std::string ShortName(std::string name) {
  auto at = name.rfind("::");
  return at == std::string::npos ? name : name.substr(at + 2);
}

}  // namespace detail

// Base of operators with forward and backward: class Op : public Function<Op> { static ...
// Forward(AutogradContext *, args...); static BaseTensorPtrList Backward(AutogradContext *,
// BaseTensorPtrList grad_outputs); };  then Op::Apply(args...) runs it.
//
// Forward returns a BaseTensorPtr or a BaseTensorPtrList (new tensors); its arguments after ctx
// are BaseTensorPtr or other values (numbers, strings: never differentiated).  Backward gets
// one gradient per output and returns one gradient (or nullptr) per tensor argument of Forward
// (or per argument); a gradient in a broadcast shape is summed back to its input's shape.
template <typename T>
class Function {
 public:
  template <typename... Args>
  static auto Apply(const Args &...args) {
    auto ctx = std::make_shared<AutogradContext>();
    py::list sources;
    std::vector<int> positions;
    (detail::CollectInput(*ctx, sources, positions, args), ...);
    using Result = decltype(T::Forward(ctx.get(), args...));
    static_assert(std::is_same_v<Result, BaseTensorPtr> || std::is_same_v<Result, BaseTensorPtrList>,
                  "Forward returns a BaseTensorPtr or a BaseTensorPtrList");
    Result result;
    {
      detail::NoGradGuard no_grad;
      result = T::Forward(ctx.get(), args...);
    }
    const auto &need = ctx->needs_input_grad();
    if (std::any_of(need.begin(), need.end(), [](bool b) { return b; })) {
      BaseTensorPtrList outs = detail::AsList(result);
      py::list py_outs;
      for (size_t i = 0; i < outs.size(); i++) {
        if (!outs[i]) throw std::invalid_argument("hyb: Forward returned a null tensor");
        for (size_t j = 0; j < i; j++) {
          if (outs[j] == outs[i]) throw std::invalid_argument("hyb: Forward returned the same tensor twice");
        }
        py::object t = detail::NewPythonTensor(outs[i]);
        outs[i]->set_python(t.ptr());
        py_outs.append(t);
      }
      auto backward = py::cpp_function([ctx](BaseTensorPtrList grad_outputs) {
        return T::Backward(ctx.get(), std::move(grad_outputs));
      });
      std::string name = detail::ShortName(py::type_id<T>());
      detail::bridge().attr("_cpp_record")(name, sources, py_outs, backward, py::cast(positions));
    }
    return result;
  }
};

}  // namespace hyb

// Conversions between Python values and BaseTensorPtr (see the top of this file).
namespace pybind11 {
namespace detail {
template <>
class type_caster<hyb::BaseTensorPtr> {
 public:
  PYBIND11_TYPE_CASTER(hyb::BaseTensorPtr, const_name("hyb.Tensor"));

  bool load(handle src, bool) {
    if (src.is_none()) {
      value = nullptr;
      return true;
    }
    value = hyb::detail::FromPython(src);
    return static_cast<bool>(value);
  }

  static handle cast(const hyb::BaseTensorPtr &src, return_value_policy, handle) {
    return hyb::detail::ToPython(src).release();
  }
};
}  // namespace detail
}  // namespace pybind11

#endif  // HYB_EXTENSION_H_
