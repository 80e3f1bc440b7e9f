"""The aot kind's contract on the CPU, written as a MindSpore user writes the scripts (``mindspore``
replaced by ``hyb``): sources hyb compiles and caches, the companions ``<Name>Init``,
``<Name>InferShape`` and ``<Name>InferType``, the workspace, ``AotExtra`` (custom_aot_extra.h)
with attributes from the registration and the call, MindSpore's module paths, and the exact error
for each thing a library or script can get wrong.

The kernel sources are written once per module into one directory, so that each compiles once.
"""
import ctypes
import gc
import os
import shutil
import subprocess

import numpy as np
import pytest

import hyb
import hyb.ops as ops
from hyb.common import dtype as mstype
from hyb.ops import CustomRegOp, DataType
from hyb.ops.aot_build import AotCompileError
from hyb.ops.kind_aot import AotExceptionError, AotKernelError

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile aot sources")

PRELUDE = '#include <stdint.h>\n#include <string.h>\n#include <stdexcept>\n#include <vector>\n' \
          '#include <string>\n#include "custom_aot_extra.h"\n'

SOURCES = {
    # The plain signature, no companions.
    "add.cc": """
#include <string.h>
#include <stdint.h>
extern "C" int CustomAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  if (nparam != 3) return 1;
  float *a = static_cast<float *>(params[0]), *b = static_cast<float *>(params[1]);
  float *c = static_cast<float *>(params[2]);
  size_t n = 1;
  for (int i = 0; i < ndims[2]; i++) n *= shapes[2][i];
  for (size_t i = 0; i < n; i++) c[i] = a[i] + b[i];
  return 0;
}
""",
    # Attributes read in Init into the kernel's data, a workspace after the outputs; the style of
    # MindSpore's add_with_attr.cc.  The data's destructor counts how often it ran.
    "scale_add.cc": PRELUDE + """
static int destroyed = 0;
extern "C" int destroyed_count() { return destroyed; }
class scale_add_data : public AotKernelData {
 public:
  float scale;
  std::vector<float> paddings;
  ~scale_add_data() override { destroyed++; }
};
extern "C" int ScaleAddInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  size_t count = 1;
  for (int i = 0; i < ndims[0]; i++) count *= shapes[0][i];
  extra->SetWorkSpace({count * sizeof(float)});
  auto *data = new scale_add_data;
  data->scale = extra->Attr<float>("scale");
  data->paddings = extra->Attr<std::vector<float>>("paddings");
  extra->SetKernelData(data);
  return 0;
}
extern "C" int ScaleAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra_void) {
  if (nparam != 4 || ndims[3] != 1 || strcmp(dtypes[3], "uint8") != 0) return 7;
  AotExtra *extra = static_cast<AotExtra *>(extra_void);
  auto *data = static_cast<scale_add_data *>(extra->KernelData());
  float *x = static_cast<float *>(params[0]), *y = static_cast<float *>(params[1]);
  float *out = static_cast<float *>(params[2]), *tmp = static_cast<float *>(params[3]);
  size_t n = 1;
  for (int i = 0; i < ndims[2]; i++) n *= shapes[2][i];
  if (shapes[3][0] != static_cast<int64_t>(n * sizeof(float))) return 8;
  for (size_t i = 0; i < n; i++) tmp[i] = x[i] + y[i] * data->scale + data->paddings[0];
  for (size_t i = 0; i < n; i++) out[i] = tmp[i] + data->paddings[1];
  return 0;
}
""",
    # Every attribute type through Attr<T>, read in the kernel itself (extra is the same AotExtra).
    "attrs.cc": PRELUDE + """
extern "C" int AttrsInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) { return 0; }
extern "C" int Attrs(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                     void *extra_void) {
  AotExtra *extra = static_cast<AotExtra *>(extra_void);
  double *out = static_cast<double *>(params[1]);
  out[0] = extra->Attr<int64_t>("i");
  out[1] = extra->Attr<float>("f");
  out[2] = extra->Attr<bool>("b") ? 1 : 0;
  out[3] = extra->Attr<std::string>("s") == "hello" ? 1 : 0;
  double sum = 0;
  for (int64_t v : extra->Attr<std::vector<int64_t>>("li")) sum += v;
  out[4] = sum;
  sum = 0;
  for (float v : extra->Attr<std::vector<float>>("lf")) sum += v;
  out[5] = sum;
  sum = 0;
  for (auto &row : extra->Attr<std::vector<std::vector<int64_t>>>("grid")) sum += row.size() * 100 + row[0];
  out[6] = sum;
  out[7] = extra->HasAttr("i") * 10 + extra->HasAttr("nope");
  out[8] = extra->Attr<int>("i") + extra->Attr<double>("f");
  return 0;
}
extern "C" int AttrsUnknownInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) { return 0; }
extern "C" int AttrsWrongTypeInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) { return 0; }
extern "C" int AttrsUnknown(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  return static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("nope"));
}
extern "C" int AttrsWrongType(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                              void *stream, void *extra) {
  return static_cast<int>(static_cast<AotExtra *>(extra)->Attr<int64_t>("f"));
}
extern "C" int Throws(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  throw std::runtime_error("no luck");
}
extern "C" int BadInitInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) { return 5; }
extern "C" int BadInit(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) { return 0; }
""",
    # Output shapes and dtypes from the library; the style of MindSpore's reduce.cc.
    "reduce.cc": PRELUDE + """
enum TypeId : int {};
extern "C" std::vector<int64_t> RowSumInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  if (extra->Attr<bool>("keep_dim")) return {shapes[0][0], 1};
  return {shapes[0][0]};
}
extern "C" TypeId RowSumInferType(std::vector<TypeId> type_ids, AotExtra *extra) { return type_ids[0]; }
class row_sum_data : public AotKernelData {
 public:
  bool keep_dim;
};
extern "C" int RowSumInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new row_sum_data;
  data->keep_dim = extra->Attr<bool>("keep_dim");
  extra->SetKernelData(data);
  return 0;
}
extern "C" int RowSum(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                      void *extra) {
  float *x = static_cast<float *>(params[0]), *y = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < shapes[0][0]; i++) {
    y[i] = 0;
    for (int64_t j = 0; j < shapes[0][1]; j++) y[i] += x[i * shapes[0][1] + j];
  }
  return 0;
}
// Two outputs: the sum as float64 and the count of columns as int32.
extern "C" std::vector<std::vector<int64_t>> SumCountInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return {{shapes[0][0]}, {shapes[0][0]}};
}
extern "C" std::vector<TypeId> SumCountInferType(std::vector<TypeId> type_ids, AotExtra *extra) {
  return {static_cast<TypeId>(hyb_aot::kNumberTypeFloat64), static_cast<TypeId>(hyb_aot::kNumberTypeInt32)};
}
extern "C" int SumCount(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra) {
  if (nparam != 3 || strcmp(dtypes[1], "float64") != 0 || strcmp(dtypes[2], "int32") != 0) return 9;
  float *x = static_cast<float *>(params[0]);
  double *s = static_cast<double *>(params[1]);
  int32_t *c = static_cast<int32_t *>(params[2]);
  for (int64_t i = 0; i < shapes[0][0]; i++) {
    s[i] = 0;
    for (int64_t j = 0; j < shapes[0][1]; j++) s[i] += x[i * shapes[0][1] + j];
    c[i] = static_cast<int32_t>(shapes[0][1]);
  }
  return 0;
}
extern "C" std::vector<int64_t> NegShapeInferShape(int *ndims, int64_t **shapes, AotExtra *extra) { return {-1}; }
extern "C" int NegShape(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra) { return 0; }
extern "C" TypeId OddTypeInferType(std::vector<TypeId> type_ids, AotExtra *extra) { return static_cast<TypeId>(99); }
extern "C" int OddType(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) { return 0; }
""",
    # A compile error on line 4.
    "broken.cc": '#include <stdint.h>\nextern "C" int Broken(int nparam, void **params, int *ndims, int64_t **shapes,\n'
                 '                      const char **dtypes, void *stream, void *extra) {\n'
                 '  return undefined_name;\n}\n',
    "add.cu": """
#include <stdint.h>
__global__ void add_kernel(float *a, float *b, float *c, size_t n) {
  size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" int CustomAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  size_t n = 1;
  for (int i = 0; i < ndims[2]; i++) n *= shapes[2][i];
  add_kernel<<<(n + 255) / 256, 256>>>(static_cast<float *>(params[0]), static_cast<float *>(params[1]),
                                       static_cast<float *>(params[2]), n);
  return 0;
}
""",
    # A kernel that writes `extra` floats past the end of its output (params[1][0] says how many).
    "overrun.cc": """
#include <stdint.h>
extern "C" int Overrun(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  float *x = static_cast<float *>(params[0]), *out = static_cast<float *>(params[2]);
  int64_t n = shapes[2][0], more = static_cast<int64_t>(static_cast<float *>(params[1])[0]);
  for (int64_t i = 0; i < n + more; i++) out[i] = i < n ? x[i] * 2 : -1.0f;
  return 0;
}
""",
}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("aot_sources")
    for name, text in SOURCES.items():
        (d / name).write_text(text)
    return d


@pytest.fixture(autouse=True)
def cpu():
    hyb.set_context(device_target="CPU")
    yield
    hyb.set_context(device_target="CPU")


X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 10, np.float32)


def attr_info(name, *attrs, outputs=("y",), inputs=("x1", "x2")):
    b = CustomRegOp(name)
    for i, n in enumerate(inputs):
        b = b.input(i, n)
    for i, n in enumerate(outputs):
        b = b.output(i, n)
    b = b.dtype_format(*[DataType.None_None] * (len(inputs) + len(outputs)))
    for a in attrs:
        b = b.attr(*a[:3], value=a[3]) if len(a) == 4 else b.attr(*a)
    return b.target("CPU").get_op_info()


# ================================================================== compiling sources
def test_source_is_compiled_once_into_the_cache(src, capfd, monkeypatch):
    monkeypatch.chdir(src)
    op = ops.Custom("./add.cc:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    np.testing.assert_array_equal(op(hyb.Tensor(X), hyb.Tensor(Y)).asnumpy(), X + Y)
    lib = op._impl.path
    assert lib.startswith(os.path.join(os.environ["HYB_CACHE_DIR"], "aot", "add-")) and lib.endswith("libadd.so")
    assert f"hyb: compiling {src / 'add.cc'} with g++" in capfd.readouterr().err
    # The same source again: the cached library, no compiler run; no temporary files are left.
    again = ops.Custom("./add.cc:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    assert again._impl.path == lib and "compiling" not in capfd.readouterr().err
    assert os.listdir(os.path.dirname(lib)) == ["libadd.so"]


def test_changed_source_or_header_is_compiled_again(tmp_path, capfd):
    (tmp_path / "add.cc").write_text(SOURCES["add.cc"])
    first = ops.Custom(f"{tmp_path / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    (tmp_path / "add.cc").write_text(SOURCES["add.cc"].replace("a[i] + b[i]", "a[i] - b[i]"))
    second = ops.Custom(f"{tmp_path / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    assert first._impl.path != second._impl.path
    np.testing.assert_array_equal(second(X, Y).asnumpy(), X - Y)
    np.testing.assert_array_equal(first(X, Y).asnumpy(), X + Y)  # the first library stays loaded
    # A local header the source includes is part of the key.
    (tmp_path / "k.h").write_text("#define OP +\n")
    (tmp_path / "add.cc").write_text('#include "k.h"\n' + SOURCES["add.cc"].replace("a[i] + b[i]", "a[i] OP b[i]"))
    third = ops.Custom(f"{tmp_path / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    (tmp_path / "k.h").write_text("#define OP *\n")
    fourth = ops.Custom(f"{tmp_path / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    np.testing.assert_array_equal(third(X, Y).asnumpy(), X + Y)
    np.testing.assert_array_equal(fourth(X, Y).asnumpy(), X * Y)


def test_a_library_path_keeps_working(src, tmp_path):
    so = tmp_path / "add.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(so), str(src / "add.cc")], check=True)
    op = ops.Custom(f"{so}:CustomAdd", (X.shape,), (mstype.float32,), "aot")
    np.testing.assert_array_equal(op(X, Y)[0].asnumpy(), X + Y)
    assert op._impl.path == str(so)


def test_compile_error_points_at_the_users_line(src):
    with pytest.raises(AotCompileError) as e:
        ops.Custom(f"{src / 'broken.cc'}:Broken", lambda x: x, lambda x: x, "aot")
    err = e.value
    assert isinstance(err, hyb.HybridError)
    assert (err.filename, err.line) == (str(src / "broken.cc"), 4)
    assert err.message.startswith("compiling aot operator source broken.cc failed: ")
    assert "undefined_name" in err.message and "was not declared" in err.message
    text = str(err)
    assert f"{src / 'broken.cc'}:4:" in text and "  return undefined_name;" in text
    assert "-I " + hyb.ops.builder.include_dir() in text  # the command is shown
    assert not any(n.endswith(".so") for n in os.listdir(os.path.join(os.environ["HYB_CACHE_DIR"], "aot",
                                                                      _entry("broken"))))


def _entry(stem):
    return next(n for n in os.listdir(os.path.join(os.environ["HYB_CACHE_DIR"], "aot")) if n.startswith(stem + "-"))


def test_cuda_source_on_cpu_is_refused(src):
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        ops.Custom(f"{src / 'add.cu'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    assert (f"aot operator `CustomAdd`: {src / 'add.cu'} is a CUDA source, which needs device_target GPU; "
            "the device target is CPU") in str(e.value)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_source_on_gpu_is_compiled_with_nvcc_then_refused(src, capfd):
    hyb.set_context(device_target="GPU")
    op = ops.Custom(f"{src / 'add.cu'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")
    assert "with nvcc" in capfd.readouterr().err and op._impl.path.endswith("libadd.so")
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        op(X, Y)
    assert "hyb calls aot kernels on the CPU with host memory; it has no GPU runtime for CUDA kernels" in str(e.value)
    hyb.set_context(device_target="CPU")
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        op(X, Y)
    assert "is a CUDA source, which needs device_target GPU" in str(e.value)


# ================================================================== Init, workspace, AotExtra
def test_init_attributes_kernel_data_and_workspace(src):
    info = attr_info("scale_add", ("scale", "required", "all", 2.0), ("paddings", "required", "all", [0.5, 1.0]))
    op = ops.Custom(f"{src / 'scale_add.cc'}:ScaleAdd", lambda x, *_: x, lambda x, *_: x, "aot", reg_info=info)
    np.testing.assert_allclose(op(hyb.Tensor(X), hyb.Tensor(Y)).asnumpy(), X + Y * 2 + 1.5)
    # Init runs again for new shapes (its workspace grows) and for attribute values given in the call.
    big = np.ones((5, 7), np.float32)
    np.testing.assert_allclose(op(big, big).asnumpy(), big + big * 2 + 1.5)
    np.testing.assert_allclose(op(X, Y, 3.0, (0.0, 0.0)).asnumpy(), X + Y * 3)
    assert len(op._impl._configs) == 3


def test_kernel_data_is_deleted_with_the_operator(src):
    info = attr_info("scale_add", ("scale", "required", "float", "1.0"), ("paddings", "required", "listFloat", "0,0"))
    op = ops.Custom(f"{src / 'scale_add.cc'}:ScaleAdd", lambda x, _: x, lambda x, _: x, "aot", reg_info=info)
    count = getattr(op._impl._lib, "destroyed_count")
    before = count()
    for rows in range(1, 11):  # ten shapes: the oldest two combinations are dropped
        a = np.ones((rows, 2), np.float32)
        op(a, a)
    assert count() == before + 2
    del op
    gc.collect()
    assert count() == before + 10


def test_every_attribute_type(src):
    info = attr_info("attrs", ("i", "required", "int", "7"), ("f", "required", "float", "0.25"),
                     ("b", "required", "bool", "true"), ("s", "required", "str", "hello"),
                     ("li", "required", "listInt", "1,2,3"), ("lf", "required", "listFloat", "0.5,1.5"),
                     ("grid", "required", "all", [[4, 5], [6, 7, 8]]), inputs=("x",))
    op = ops.Custom(f"{src / 'attrs.cc'}:Attrs", lambda x, *_: (9,), lambda x, *_: mstype.float64, "aot", reg_info=info)
    got = op(np.zeros(1, np.float32)).asnumpy()
    np.testing.assert_array_equal(got, [7, 0.25, 1, 1, 6, 2.0, 200 + 300 + 4 + 6, 10, 7.25])
    got = op(np.zeros(1, np.float32), -2, 1.5, False, "other").asnumpy()  # values passed at call time
    np.testing.assert_array_equal(got[:4], [-2, 1.5, 0, 0])


def test_unknown_attribute_in_attr_is_an_error_not_a_crash(src):
    # No operator information at all: extra is still an AotExtra, with no attributes.
    op = ops.Custom(f"{src / 'attrs.cc'}:AttrsUnknown", lambda x: x, lambda x: x, "aot")
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X)
    assert str(e.value).startswith("error: aot operator `AttrsUnknown` has no attribute `nope` (it has no attributes); "
                                   "asked for by the kernel of `AttrsUnknown`")
    info = attr_info("u", ("scale", "required", "float", "1.0"), inputs=("x",))
    op = ops.Custom(f"{src / 'attrs.cc'}:AttrsUnknown", lambda x: x, lambda x: x, "aot", reg_info=info)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X)
    assert "has no attribute `nope` (it has: scale)" in str(e.value)
    assert 'CustomRegOp(...).attr("name", "required", "all", value=...)' in str(e.value)


def test_wrong_attribute_type_is_an_error(src):
    info = attr_info("w", ("f", "required", "float", "0.5"), inputs=("x",))
    op = ops.Custom(f"{src / 'attrs.cc'}:AttrsWrongType", lambda x: x, lambda x: x, "aot", reg_info=info)
    with pytest.raises(hyb.HybridTypeError) as e:
        op(X)
    assert ("attribute `f` of aot operator `AttrsWrongType` is a float (0.5), not the int64_t that Attr<int64_t> "
            "asks for (in the kernel of `AttrsWrongType`") in str(e.value)
    # a "float" attribute whose value is integral reads as an integer, as in MindSpore (which keeps 3 an int)
    info = attr_info("w", ("f", "required", "float"), inputs=("x",))
    op = ops.Custom(f"{src / 'attrs.cc'}:AttrsWrongType", lambda x, f: x, lambda x, f: x, "aot", reg_info=info)
    op(X, 0)
    with pytest.raises(AotKernelError) as e:
        op(X, 3)  # the kernel returns the value it read as its status
    assert e.value.code == 3


def test_exception_and_init_status_are_errors(src):
    op = ops.Custom(f"{src / 'attrs.cc'}:Throws", lambda x: x, lambda x: x, "aot")
    with pytest.raises(AotExceptionError) as e:
        op(X)
    assert "aot operator `Throws`: the kernel threw an exception: no luck" in str(e.value)
    op = ops.Custom(f"{src / 'attrs.cc'}:BadInit", lambda x: x, lambda x: x, "aot")
    with pytest.raises(AotKernelError) as e:
        op(X)
    assert e.value.code == 5 and "aot function `BadInitInit` in" in str(e.value) and "returned 5" in str(e.value)


# ================================================================== InferShape / InferType
def test_infer_shape_and_type_from_the_library(src):
    for keep_dim, shape in [(False, (2,)), (True, (2, 1))]:
        info = attr_info("row_sum", ("keep_dim", "required", "all", keep_dim), inputs=("x",))
        op = ops.Custom(f"{src / 'reduce.cc'}:RowSum", None, None, "aot", reg_info=info)
        y = op(hyb.Tensor(X)).asnumpy()
        assert y.shape == shape and y.dtype == np.float32
        np.testing.assert_array_equal(y.reshape(-1), X.sum(1))
    # out_dtype given, out_shape from InferShape
    op = ops.Custom(f"{src / 'reduce.cc'}:RowSum", None, mstype.float32, "aot", reg_info=info)
    assert op(X).shape == (2, 1)


def test_several_outputs_from_infer_shape_and_infer_type(src):
    info = attr_info("sum_count", outputs=("s", "c"), inputs=("x",))
    op = ops.Custom(f"{src / 'reduce.cc'}:SumCount", None, None, "aot", reg_info=info)
    s, c = op(X)
    assert s.asnumpy().dtype == np.float64 and c.asnumpy().dtype == np.int32
    np.testing.assert_array_equal(s.asnumpy(), X.sum(1))
    np.testing.assert_array_equal(c.asnumpy(), [3, 3])


def test_infer_results_hyb_cannot_use_are_errors(src):
    op = ops.Custom(f"{src / 'reduce.cc'}:NegShape", None, mstype.float32, "aot")
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X)
    assert "`NegShapeInferShape` in" in str(e.value) and "gave the shape [-1]" in str(e.value)
    op = ops.Custom(f"{src / 'reduce.cc'}:OddType", lambda x: x, None, "aot")
    with pytest.raises(hyb.HybridTypeError) as e:
        op(X)
    assert "returned TypeId 99, which is not a tensor dtype aot kernels take" in str(e.value)


# ================================================================== what the library lacks
def test_missing_function(src):
    with pytest.raises(hyb.HybridArgumentError) as e:
        ops.Custom(f"{src / 'add.cc'}:CustomSub", lambda x, _: x, lambda x, _: x, "aot")
    assert f"aot library {src / 'add.cc'} (compiled to " in str(e.value)
    assert "has no function `CustomSub`" in str(e.value)


def test_missing_infer_functions_without_out_shape_or_dtype(src):
    with pytest.raises(hyb.HybridArgumentError) as e:
        ops.Custom(f"{src / 'add.cc'}:CustomAdd", None, None, "aot")
    assert "aot operator `CustomAdd` needs out_shape and out_dtype: hyb allocates its outputs, and its library" \
        in str(e.value)
    assert "has neither `CustomAddInferShape` nor `CustomAddInferType`" in str(e.value)
    with pytest.raises(hyb.HybridArgumentError) as e:
        ops.Custom(f"{src / 'add.cc'}:CustomAdd", lambda x, _: x, None, "aot")
    assert "needs out_dtype: hyb allocates its outputs, and its library" in str(e.value)
    assert "has no `CustomAddInferType`" in str(e.value)


def test_missing_init_when_attributes_are_declared(src):
    info = attr_info("add", ("scale", "required", "float", "1.0"))
    with pytest.raises(hyb.HybridArgumentError) as e:
        ops.Custom(f"{src / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot", reg_info=info)
    assert "has no function `CustomAddInit`, but the operator information of `CustomAdd` declares attributes " \
        "(scale), which an aot kernel reads in `CustomAddInit` through AotExtra" in str(e.value)


def test_wrong_output_count_is_refused_before_the_kernel_runs(src):
    info = attr_info("add", outputs=("y", "z"))
    op = ops.Custom(f"{src / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot", reg_info=info)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X, Y)
    assert "aot operator `CustomAdd`: its operator information declares 2 outputs (y, z) but out_shape/out_dtype " \
        "give 1" in str(e.value)


def test_mindspore_style_kernel_with_null_extra_no_longer_crashes(src):
    # MindSpore's examples read KernelData() through extra; hyb used to pass NULL without
    # attributes.  The kernel reading an attribute gets a clean error instead.
    op = ops.Custom(f"{src / 'reduce.cc'}:RowSum", lambda x: (x[0],), lambda x: x, "aot")
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X)
    assert "has no attribute `keep_dim` (it has no attributes); asked for by the Init function of `RowSum`" \
        in str(e.value)


# ================================================================== MindSpore's module paths
def test_mindspore_module_paths():
    import hyb.common
    from hyb.common import Parameter, Tensor
    from hyb.ops.operations._inner_ops import ConvertToDynamic
    assert Tensor is hyb.Tensor and Parameter is hyb.Parameter and hyb.common.dtype is mstype
    assert mstype.float32 == np.float32 and mstype.float_ == np.float32 and mstype.int_ == np.int64
    assert mstype.uint64 == np.uint64 and mstype.half == np.float16 and mstype.double == np.float64
    assert mstype.dtype_to_nptype(mstype.int16) is np.int16
    x = hyb.Tensor(np.array([1.0, 2.0, 3.0], np.float32))
    assert ConvertToDynamic()(x) is x
    assert isinstance(ConvertToDynamic(is_dynamic_rank=True)(np.ones(2)), hyb.Tensor)
    with pytest.raises(hyb.HybridTypeError):
        ConvertToDynamic(is_dynamic_rank="yes")


def test_convert_to_dynamic_passes_gradients_into_an_aot_op(src):
    from hyb.ops.operations._inner_ops import ConvertToDynamic
    square = ops.Custom(f"{src / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot",
                        bprop=lambda x, y, out, dout: (dout, dout))
    dyn = ConvertToDynamic()
    x = np.array([1.0, 2.0, 3.0], np.float32)
    dx = hyb.grad(lambda a: square(dyn(a), dyn(a)).sum())(hyb.Tensor(x))
    np.testing.assert_array_equal(dx.asnumpy(), [2.0, 2.0, 2.0])


def test_helper_library_is_not_reloaded_per_operator(src):
    from hyb.ops import kind_aot
    ops.Custom(f"{src / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")(X, Y)
    rt = kind_aot.runtime()
    ops.Custom(f"{src / 'add.cc'}:CustomAdd", lambda x, _: x, lambda x, _: x, "aot")(X, Y)
    assert kind_aot.runtime() is rt and isinstance(rt, ctypes.CDLL)


def test_a_kernel_writing_past_its_output_is_reported_not_a_corruption(src):
    op = ops.Custom(f"{src}/overrun.cc:Overrun", lambda x, m: x, lambda x, m: x, "aot")
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(op(x, np.array([0], np.float32)).asnumpy(), 2 * x)
    with pytest.warns(hyb.HybridWarning) as w:
        out = op(x, np.array([3], np.float32))
    np.testing.assert_array_equal(out.asnumpy(), 2 * x)  # the stray writes went to the guard zone
    message = str(w[0].message)
    assert "aot kernel `Overrun` in " in message
    assert ("wrote past the end of its output 0 (20 bytes): at least 12 bytes beyond it; hyb's 65536-byte guard "
            "zone took the stray writes") in message
    with pytest.raises(hyb.HybridError) as e:  # to the guard's end: memory after it may be hit
        op(x, np.array([(65536 - 16) // 4], np.float32))
    assert "at least 65520 bytes beyond it, to the end of hyb's 65536-byte guard zone, so memory after it may be " \
           "corrupted" in str(e.value)


def test_ascend_c_operators_are_refused_with_their_name(tmp_path):
    op = ops.Custom("AddCustom", lambda x, y: x, lambda x, y: x, "aot")  # made, as in MindSpore
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        op(X, Y)
    assert str(e.value).splitlines()[0] == (
        "error: func_type=\"aot\" with the bare name 'AddCustom' is an Ascend C operator (MindSpore finds it in the "
        "Ascend operator package by name), which runs on Huawei Ascend NPUs; hyb does not target them")
    kernel = tmp_path / "add_custom.cpp"
    kernel.write_text('#include <stdint.h>\n#include "kernel_operator.h"\n'
                      'extern "C" __global__ __aicore__ void add_custom(uint8_t *x) {}\n')
    op = ops.Custom(f"{kernel}:add_custom", lambda x: x, lambda x: x, "aot")
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        op(X)
    assert e.value.span.line == 2 and e.value.span.col == 1
    assert "add_custom.cpp is an Ascend C kernel, which runs on Huawei Ascend NPUs; hyb does not target them" \
        in str(e.value)
