// hyb's runtime library for aot operators: the AotExtra objects hyb hands to kernels, and the
// calls into a kernel library's functions, made from C++ so that C++ results (std::vector) come
// back to Python as plain numbers and C++ exceptions (an unknown attribute in Attr<T>) come back
// as an error code and a message instead of ending the process.
//
// hyb builds it once (hyb/ops/aot_build.py) and calls it through ctypes (hyb/ops/kind_aot.py).
// Every entry point returns 0 on success, else an error kind (HYB_AOT_*), with the text in
// hyb_aot_error().
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

namespace {

enum ErrorKind : int {
  HYB_AOT_OK = 0,
  HYB_AOT_NO_ATTR = 1,     // Attr<T> of a name the operator does not have
  HYB_AOT_ATTR_TYPE = 2,   // Attr<T> of a value that is not a T
  HYB_AOT_EXCEPTION = 3,   // another std::exception from the library's code
  HYB_AOT_UNKNOWN = 4,     // an exception of another type
  HYB_AOT_BAD_VALUE = 5,   // hyb passed an attribute it could not decode (a bug in hyb)
};

thread_local std::string g_error;
thread_local std::vector<std::vector<int64_t>> g_shapes;
thread_local std::vector<int> g_types;

struct AttrError : std::runtime_error {
  int kind;
  AttrError(int k, const std::string &what) : std::runtime_error(what), kind(k) {}
};

// An attribute value: a bool, an integer, a float, a string or a list of values.
struct Value {
  enum Kind { Bool, Int, Float, Str, List } kind = Int;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<Value> items;

  std::string describe() const {
    std::ostringstream o;
    switch (kind) {
      case Bool: o << "a bool (" << (b ? "true" : "false") << ")"; break;
      case Int: o << "an int (" << i << ")"; break;
      case Float: o << "a float (" << f << ")"; break;
      case Str: o << "a string (\"" << s << "\")"; break;
      case List: o << "a list of " << items.size() << " value" << (items.size() == 1 ? "" : "s"); break;
    }
    return o.str();
  }
};

// Decodes hyb's text form of a value: b0 b1 | i<int>; | f<float>; | s<len>:<bytes> | l<count>:<values>.
bool decode(const char *&p, Value &v) {
  char *end = nullptr;
  switch (*p++) {
    case 'b':
      v.kind = Value::Bool;
      v.b = *p++ == '1';
      return true;
    case 'i':
      v.kind = Value::Int;
      v.i = std::strtoll(p, &end, 10);
      if (*end != ';') return false;
      p = end + 1;
      return true;
    case 'f':
      v.kind = Value::Float;
      v.f = std::strtod(p, &end);
      if (*end != ';') return false;
      p = end + 1;
      return true;
    case 's': {
      v.kind = Value::Str;
      long n = std::strtol(p, &end, 10);
      if (*end != ':' || n < 0) return false;
      p = end + 1;
      if (std::strlen(p) < static_cast<size_t>(n)) return false;
      v.s.assign(p, n);
      p += n;
      return true;
    }
    case 'l': {
      v.kind = Value::List;
      long n = std::strtol(p, &end, 10);
      if (*end != ':' || n < 0) return false;
      p = end + 1;
      v.items.resize(n);
      for (auto &item : v.items) {
        if (!decode(p, item)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

class HybExtra : public AotExtra {
 public:
  std::string op;
  std::map<std::string, Value> attrs;

  bool HasAttr(std::string name) override { return attrs.count(name) != 0; }

 private:
  const Value &get(const std::string &name) {
    auto it = attrs.find(name);
    if (it == attrs.end()) {
      std::string have;
      for (auto &kv : attrs) have += (have.empty() ? "" : ", ") + kv.first;
      throw AttrError(HYB_AOT_NO_ATTR, "aot operator `" + op + "` has no attribute `" + name + "` (" +
                                           (have.empty() ? "it has no attributes" : "it has: " + have) + ")");
    }
    return it->second;
  }
  [[noreturn]] void wrong(const std::string &name, const Value &v, const char *asked) {
    throw AttrError(HYB_AOT_ATTR_TYPE, "attribute `" + name + "` of aot operator `" + op + "` is " + v.describe() +
                                           ", not the " + asked + " that Attr<" + asked + "> asks for");
  }
  static bool number(const Value &v) { return v.kind == Value::Int || v.kind == Value::Float; }
  static double as_double(const Value &v) { return v.kind == Value::Int ? static_cast<double>(v.i) : v.f; }

  bool GetAttrBool(std::string name) override {
    const Value &v = get(name);
    if (v.kind != Value::Bool) wrong(name, v, "bool");
    return v.b;
  }
  int64_t GetAttrInt(std::string name) override {
    const Value &v = get(name);
    if (v.kind != Value::Int) wrong(name, v, "int64_t");
    return v.i;
  }
  float GetAttrFloat(std::string name) override {
    const Value &v = get(name);
    if (!number(v)) wrong(name, v, "float");
    return static_cast<float>(as_double(v));
  }
  double GetAttrDouble(std::string name) override {
    const Value &v = get(name);
    if (!number(v)) wrong(name, v, "double");
    return as_double(v);
  }
  std::string GetAttrStr(std::string name) override {
    const Value &v = get(name);
    if (v.kind != Value::Str) wrong(name, v, "std::string");
    return v.s;
  }
  template <typename T, typename Check, typename Get>
  std::vector<T> list(const std::string &name, const char *asked, Check check, Get get_item) {
    const Value &v = get(name);
    if (v.kind != Value::List) wrong(name, v, asked);
    std::vector<T> out;
    for (const Value &item : v.items) {
      if (!check(item)) wrong(name, v, asked);
      out.push_back(get_item(item));
    }
    return out;
  }
  std::vector<int64_t> GetAttrIntVec(std::string name) override {
    return list<int64_t>(
        name, "std::vector<int64_t>", [](const Value &x) { return x.kind == Value::Int; },
        [](const Value &x) { return x.i; });
  }
  std::vector<float> GetAttrFloatVec(std::string name) override {
    return list<float>(name, "std::vector<float>", number, [](const Value &x) { return float(as_double(x)); });
  }
  std::vector<double> GetAttrDoubleVec(std::string name) override {
    return list<double>(name, "std::vector<double>", number, as_double);
  }
  std::vector<bool> GetAttrBoolVec(std::string name) override {
    return list<bool>(
        name, "std::vector<bool>", [](const Value &x) { return x.kind == Value::Bool; },
        [](const Value &x) { return x.b; });
  }
  std::vector<std::string> GetAttrStrVec(std::string name) override {
    return list<std::string>(
        name, "std::vector<std::string>", [](const Value &x) { return x.kind == Value::Str; },
        [](const Value &x) { return x.s; });
  }
  std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) override {
    auto is_row = [](const Value &x) {
      if (x.kind != Value::List) return false;
      for (auto &y : x.items)
        if (y.kind != Value::Int) return false;
      return true;
    };
    return list<std::vector<int64_t>>(name, "std::vector<std::vector<int64_t>>", is_row, [](const Value &x) {
      std::vector<int64_t> row;
      for (auto &y : x.items) row.push_back(y.i);
      return row;
    });
  }
  std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) override {
    auto is_row = [](const Value &x) {
      if (x.kind != Value::List) return false;
      for (auto &y : x.items)
        if (!number(y)) return false;
      return true;
    };
    return list<std::vector<float>>(name, "std::vector<std::vector<float>>", is_row, [](const Value &x) {
      std::vector<float> row;
      for (auto &y : x.items) row.push_back(float(as_double(y)));
      return row;
    });
  }
};

// Runs f, turning an exception into an error kind and g_error.
template <typename F>
int guarded(const char *what, F f) {
  g_error.clear();
  try {
    f();
    return HYB_AOT_OK;
  } catch (const AttrError &e) {
    g_error = e.what();
    return e.kind;
  } catch (const std::exception &e) {
    g_error = std::string(what) + " threw an exception: " + e.what();
    return HYB_AOT_EXCEPTION;
  } catch (...) {
    g_error = std::string(what) + " threw an exception that is not a std::exception";
    return HYB_AOT_UNKNOWN;
  }
}

enum TypeIdAbi : int {};
using InitFn = int (*)(int *, int64_t **, const char **, AotExtra *);
using KernelFn = int (*)(int, void **, int *, int64_t **, const char **, void *, void *);
using ShapeFn = std::vector<int64_t> (*)(int *, int64_t **, AotExtra *);
using ShapesFn = std::vector<std::vector<int64_t>> (*)(int *, int64_t **, AotExtra *);
using TypeFn = TypeIdAbi (*)(std::vector<TypeIdAbi>, AotExtra *);
using TypesFn = std::vector<TypeIdAbi> (*)(std::vector<TypeIdAbi>, AotExtra *);

}  // namespace

extern "C" {

const char *hyb_aot_error() { return g_error.c_str(); }

// A new AotExtra for operator `op`; NULL when `attrs` (name '=' encoded value '\n' ...) is garbled.
void *hyb_aot_extra_new(const char *op, int nattr, const char **names, const char **values) {
  auto *e = new HybExtra;
  e->op = op;
  for (int k = 0; k < nattr; k++) {
    const char *p = values[k];
    Value v;
    if (!decode(p, v) || *p != '\0') {
      g_error = std::string("cannot decode attribute `") + names[k] + "`";
      delete e;
      return nullptr;
    }
    e->attrs[names[k]] = v;
  }
  return static_cast<AotExtra *>(e);
}

// Deletes the kernel data (through its virtual destructor, in the kernel's library) and the object.
int hyb_aot_extra_free(void *extra) {
  auto *e = static_cast<AotExtra *>(extra);
  int kind = guarded("the destructor of the kernel data", [&] { e->DestructKernelData(); });
  delete static_cast<HybExtra *>(e);
  return kind;
}

int hyb_aot_workspace_count(void *extra) { return static_cast<int>(static_cast<AotExtra *>(extra)->WorkSpace().size()); }

size_t hyb_aot_workspace_at(void *extra, int i) { return static_cast<AotExtra *>(extra)->WorkSpace()[i]; }

int hyb_aot_call_init(void *fn, int *ndims, int64_t **shapes, const char **dtypes, void *extra, int *status) {
  return guarded("the Init function", [&] {
    *status = reinterpret_cast<InitFn>(fn)(ndims, shapes, dtypes, static_cast<AotExtra *>(extra));
  });
}

int hyb_aot_call_kernel(void *fn, int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                        void *stream, void *extra, int *status) {
  return guarded("the kernel", [&] {
    *status = reinterpret_cast<KernelFn>(fn)(nparam, params, ndims, shapes, dtypes, stream, extra);
  });
}

// Calls NameInferShape; its result (one shape, or one per output when `several`) is read with
// hyb_aot_shape_count / _rank / _dims.
int hyb_aot_call_infer_shape(void *fn, int several, int *ndims, int64_t **shapes, void *extra) {
  g_shapes.clear();
  return guarded("the InferShape function", [&] {
    if (several) {
      g_shapes = reinterpret_cast<ShapesFn>(fn)(ndims, shapes, static_cast<AotExtra *>(extra));
    } else {
      g_shapes.push_back(reinterpret_cast<ShapeFn>(fn)(ndims, shapes, static_cast<AotExtra *>(extra)));
    }
  });
}

int hyb_aot_shape_count() { return static_cast<int>(g_shapes.size()); }
int hyb_aot_shape_rank(int i) { return static_cast<int>(g_shapes[i].size()); }
const int64_t *hyb_aot_shape_dims(int i) { return g_shapes[i].data(); }

// Calls NameInferType with the inputs' TypeIds; read the result with hyb_aot_type_count / _at.
int hyb_aot_call_infer_type(void *fn, int several, const int *type_ids, int n, void *extra) {
  g_types.clear();
  std::vector<TypeIdAbi> ids;
  for (int k = 0; k < n; k++) ids.push_back(static_cast<TypeIdAbi>(type_ids[k]));
  return guarded("the InferType function", [&] {
    if (several) {
      for (TypeIdAbi t : reinterpret_cast<TypesFn>(fn)(ids, static_cast<AotExtra *>(extra))) g_types.push_back(t);
    } else {
      g_types.push_back(reinterpret_cast<TypeFn>(fn)(ids, static_cast<AotExtra *>(extra)));
    }
  });
}

int hyb_aot_type_count() { return static_cast<int>(g_types.size()); }
int hyb_aot_type_at(int i) { return g_types[i]; }

}  // extern "C"
