// custom_aot_extra.h: the `extra` argument of aot custom operators, for hyb.
//
// hyb's version of the header MindSpore gives aot kernels (same file name, same classes and
// methods, same object layout), so that a kernel source written for MindSpore compiles against
// it unchanged, and a library built against MindSpore's copy runs under hyb.  hyb puts this
// directory on the include path when it compiles a `func="file.cc:Name"` operator.
//
// The functions hyb looks up in the library, beside the kernel `Name` itself:
//
//   extern "C" int Name(int nparam, void **params, int *ndims, int64_t **shapes,
//                       const char **dtypes, void *stream, void *extra);   // extra is an AotExtra *
//   extern "C" int NameInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra);
//   extern "C" std::vector<int64_t> NameInferShape(int *ndims, int64_t **shapes, AotExtra *extra);
//   extern "C" std::vector<std::vector<int64_t>> NameInferShape(...);     // several outputs
//   extern "C" TypeId NameInferType(std::vector<TypeId> type_ids, AotExtra *extra);
//   extern "C" std::vector<TypeId> NameInferType(...);                    // several outputs
//
// NameInit (optional) runs once for each new combination of shapes, dtypes and attribute values,
// before the first launch with it; it sees the inputs then the outputs.  Workspace buffers it asks
// for with SetWorkSpace (sizes in bytes) follow the outputs in `params` (dtype "uint8", one
// dimension), and nparam counts them.  NameInferShape / NameInferType (optional) give the outputs'
// shapes / dtypes when the operator has no out_shape / out_dtype; they see the inputs only.
//
// TypeId is MindSpore's enum, which this header does not define (sources declare
// `enum TypeId : int {};` as MindSpore's examples do); its values for tensor dtypes are in
// hyb_aot:: below.  Attr<T> of a name the operator does not have, or of a value that is not a T,
// throws an exception that hyb reports as a Python error naming the attribute.
#ifndef HYB_CUSTOM_AOT_EXTRA_H_
#define HYB_CUSTOM_AOT_EXTRA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// The values of MindSpore's TypeId for the dtypes aot kernels take.
namespace hyb_aot {
enum : int {
  kNumberTypeBool = 30,
  kNumberTypeInt8 = 32,
  kNumberTypeInt16 = 33,
  kNumberTypeInt32 = 34,
  kNumberTypeInt64 = 35,
  kNumberTypeUInt8 = 37,
  kNumberTypeUInt16 = 38,
  kNumberTypeUInt32 = 39,
  kNumberTypeUInt64 = 40,
  kNumberTypeFloat16 = 42,
  kNumberTypeFloat32 = 43,
  kNumberTypeFloat64 = 44,
  kNumberTypeBFloat16 = 45,
};
template <typename T>
struct unsupported_attr_type {
  static constexpr bool value = false;
};
}  // namespace hyb_aot

// Base class of what a kernel keeps between NameInit and its launches (SetKernelData).  hyb
// deletes it, through this virtual destructor, when it drops the configuration it belongs to.
class AotKernelData {
 public:
  AotKernelData() = default;
  virtual ~AotKernelData() = default;
};

class AotExtra {
 public:
  AotExtra() = default;
  virtual ~AotExtra() = default;

  // Whether the operator has an attribute of this name (from CustomRegOp().attr or the call).
  virtual bool HasAttr(std::string name) = 0;

  // The attribute's value: T is bool, int64_t, int, float, double, std::string, or a
  // std::vector of int64_t, int, float, double, bool or std::string, or a vector of vectors of
  // int64_t or float.
  template <typename T>
  inline T Attr(std::string name) {
    static_assert(hyb_aot::unsupported_attr_type<T>::value,
                  "AotExtra::Attr<T>: T must be bool, int64_t, int, float, double, std::string, or a std::vector "
                  "of them (vectors of vectors: int64_t or float)");
    return T();
  }

  // Workspace buffers the kernel needs, in bytes (call it in NameInit).
  void SetWorkSpace(const std::vector<size_t> &workspace) { workspace_ = workspace; }
  const std::vector<size_t> &WorkSpace() const { return workspace_; }

  // What NameInit hands to the launches of the same configuration.
  void SetKernelData(AotKernelData *kernel_data) { kernel_data_ = kernel_data; }
  AotKernelData *KernelData() const { return kernel_data_; }

  void DestructKernelData() {
    delete kernel_data_;
    kernel_data_ = nullptr;
  }

 private:
  // hyb implements these (in its runtime library); their order is the object's binary interface.
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  virtual std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) = 0;
  virtual std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) = 0;
  std::vector<size_t> workspace_;
  AotKernelData *kernel_data_{nullptr};

 protected:
  // hyb's additions, after MindSpore's interface (a library built against MindSpore's header
  // never calls them).
  virtual double GetAttrDouble(std::string name) = 0;
  virtual std::vector<double> GetAttrDoubleVec(std::string name) = 0;
  virtual std::vector<bool> GetAttrBoolVec(std::string name) = 0;
  virtual std::vector<std::string> GetAttrStrVec(std::string name) = 0;
};

template <>
inline bool AotExtra::Attr(std::string name) {
  return GetAttrBool(name);
}
template <>
inline int64_t AotExtra::Attr(std::string name) {
  return GetAttrInt(name);
}
template <>
inline int AotExtra::Attr(std::string name) {
  return static_cast<int>(GetAttrInt(name));
}
template <>
inline float AotExtra::Attr(std::string name) {
  return GetAttrFloat(name);
}
template <>
inline double AotExtra::Attr(std::string name) {
  return GetAttrDouble(name);
}
template <>
inline std::string AotExtra::Attr(std::string name) {
  return GetAttrStr(name);
}
template <>
inline std::vector<int64_t> AotExtra::Attr(std::string name) {
  return GetAttrIntVec(name);
}
template <>
inline std::vector<int> AotExtra::Attr(std::string name) {
  std::vector<int64_t> v = GetAttrIntVec(name);
  return std::vector<int>(v.begin(), v.end());
}
template <>
inline std::vector<float> AotExtra::Attr(std::string name) {
  return GetAttrFloatVec(name);
}
template <>
inline std::vector<double> AotExtra::Attr(std::string name) {
  return GetAttrDoubleVec(name);
}
template <>
inline std::vector<bool> AotExtra::Attr(std::string name) {
  return GetAttrBoolVec(name);
}
template <>
inline std::vector<std::string> AotExtra::Attr(std::string name) {
  return GetAttrStrVec(name);
}
template <>
inline std::vector<std::vector<int64_t>> AotExtra::Attr(std::string name) {
  return GetAttrInt2DVec(name);
}
template <>
inline std::vector<std::vector<float>> AotExtra::Attr(std::string name) {
  return GetAttrFloat2DVec(name);
}

#endif  // HYB_CUSTOM_AOT_EXTRA_H_
