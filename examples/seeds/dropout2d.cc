// Dropout2D as an aot kernel for the CPU: y = x / keep_prob where the mask keeps an element,
// 0 elsewhere; mask is a bool tensor.  hyb compiles it: Custom("./dropout2d.cc:Dropout2D", ...).
//
// The attributes of the operator information (keep_prob, seed) arrive through the AotExtra
// object hyb passes as `extra`: Dropout2DInit reads them (once per combination of shapes, dtypes
// and attribute values) into the kernel's data, which the launches read back.
#include <stdint.h>
#include <string.h>

#include "custom_aot_extra.h"

struct DropoutData : public AotKernelData {
  double keep_prob = 1.0;
  uint64_t seed = 0;
};

extern "C" int Dropout2DInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new DropoutData;
  data->keep_prob = extra->Attr<double>("keep_prob");
  data->seed = static_cast<uint64_t>(extra->Attr<int64_t>("seed"));
  extra->SetKernelData(data);
  return 0;
}

// A small deterministic generator (xorshift64*): the same seed gives the same mask everywhere.
static double uniform(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return ((*state * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}

// float16 <-> float32, for float16 tensors (round to nearest even).
static float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do { e++; man <<= 1; } while ((man & 0x400u) == 0);
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_half(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint16_t sign = (bits >> 16) & 0x8000u;
  int32_t exp = ((bits >> 23) & 0xff) - 127 + 15;
  uint32_t man = bits & 0x7fffffu;
  if (((bits >> 23) & 0xff) == 0xff) return sign | 0x7c00u | (man ? 0x200u : 0);  // inf, nan
  if (exp >= 0x1f) return sign | 0x7c00u;                                          // overflow
  if (exp <= 0) {                                                                   // subnormal or zero
    if (exp < -10) return sign;
    man |= 0x800000u;
    uint32_t shift = 14 - exp, half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) half++;
    return sign | half;
  }
  uint16_t h = sign | (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;  // may carry into the exponent: still right
  return h;
}

template <typename T>
static void apply(const T *x, T *y, const bool *mask, size_t n, double scale) {
  for (size_t i = 0; i < n; i++) y[i] = mask[i] ? static_cast<T>(x[i] * scale) : static_cast<T>(0);
}

extern "C" int Dropout2D(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  if (nparam != 3) return 1;
  auto *data = static_cast<DropoutData *>(static_cast<AotExtra *>(extra)->KernelData());
  double keep_prob = data->keep_prob;
  if (!(keep_prob > 0.0 && keep_prob <= 1.0)) return 3;
  if (strcmp(dtypes[0], dtypes[1]) != 0 || strcmp(dtypes[2], "bool") != 0) return 4;

  size_t n = 1;
  for (int i = 0; i < ndims[0]; i++) n *= shapes[0][i];
  bool *mask = static_cast<bool *>(params[2]);
  uint64_t state = data->seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < n; i++) mask[i] = uniform(&state) < keep_prob;

  const char *dt = dtypes[0];
  void *x = params[0], *y = params[1];
  double scale = 1.0 / keep_prob;
  if (strcmp(dt, "bool") == 0) {
    for (size_t i = 0; i < n; i++) static_cast<bool *>(y)[i] = mask[i] && static_cast<bool *>(x)[i];
  } else if (strcmp(dt, "float16") == 0) {
    const uint16_t *xs = static_cast<const uint16_t *>(x);
    uint16_t *ys = static_cast<uint16_t *>(y);
    for (size_t i = 0; i < n; i++) ys[i] = mask[i] ? float_to_half(half_to_float(xs[i]) * scale) : 0;
  }
#define CASE(NAME, T) else if (strcmp(dt, NAME) == 0) apply(static_cast<T *>(x), static_cast<T *>(y), mask, n, scale);
  CASE("int8", int8_t) CASE("int16", int16_t) CASE("int32", int32_t) CASE("int64", int64_t)
  CASE("uint8", uint8_t) CASE("uint16", uint16_t) CASE("uint32", uint32_t) CASE("uint64", uint64_t)
  CASE("float32", float) CASE("float64", double)
#undef CASE
  else return 2;
  return 0;
}
