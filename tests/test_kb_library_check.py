"""A KernelBench extension's library may use libtorch for tensors, never for the work
(verifier/build/kb_library_check.py):

- the imports of honest extensions pass: allocation, data pointers, checks, the bindings, CUDA
  streams and device queries;
- an aten op that computes, ATen's per-backend entry points (at::cuda::_softmax_out, red team
  round 9), the dispatcher's lookup by name, vendor libraries and run-time symbol lookup are
  refused, each with its reason;
- Python run from the C++ (a module imported, source run, an object called: red team round 10)
  is refused beyond what the same toolchain's minimal extension imports;
- through the pipeline (CPU extensions, built here): the per-backend entry point reached under
  an asm label is `hacked` at the build stage and nothing is published; torch.relu called
  through pybind11's module import is refused at the build stage; called through builtins'
  __import__ with the imports every binding has, it passes the library check and is `hacked`
  by the executor's dispatcher watch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kb_support import evaluate_on_relu, relu_extension

from hipevolve.core.candidate import load_candidate
from hipevolve.core.evaluation import Status
from hipevolve.verifier.build import kb_library_check, kernelbench

DATA = Path(__file__).parent / "data" / "kernelbench"

# ATen's CPU kernel entry point at::cpu::relu, declared by hand under an asm label with the name
# split over string literals: no ATen header, no aten op, no dispatcher (red team round 9's 19,
# at::cuda::_softmax_out on a GPU, on the CPU). Only the build stage's library check sees it.
BACKEND_ENTRY = r"""
#include <torch/extension.h>

at::Tensor rt_rowwise(const at::Tensor& self) __asm__("_ZN2at3cpu4re" "luERKNS_6TensorE");

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    return rt_rowwise(x);
}
"""

# torch.relu called through Python from C++ (pybind11's module import): it imports only what any
# extension's bindings import, so it passes the library check; the call goes through the
# dispatcher, where the executor's watch sees aten.relu.
PYTHON_CALL = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    auto mod = pybind11::module_::import("tor" "ch");
    return mod.attr("re" "lu")(x).cast<torch::Tensor>();
}
"""

# torch.relu reached with only the Python C API every extension's bindings import (builtins,
# a dict lookup, PyObject_CallFunctionObjArgs): the library check's Python rule cannot see it.
PYTHON_CALL_BY_BUILTINS = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    namespace py = pybind11;
    py::str import_name("__imp" "ort__"), module_name("tor" "ch");
    PyObject* import = PyDict_GetItemWithError(PyEval_GetBuiltins(), import_name.ptr());
    py::object module = py::reinterpret_steal<py::object>(
        PyObject_CallFunctionObjArgs(import, module_name.ptr(), nullptr));
    py::object relu = module.attr("re" "lu");
    py::object arg = py::cast(x);
    py::object out = py::reinterpret_steal<py::object>(
        PyObject_CallFunctionObjArgs(relu.ptr(), arg.ptr(), nullptr));
    return out.cast<torch::Tensor>();
}
"""

HONEST = [
    "at::_ops::empty_like::call(at::Tensor const&, std::optional<c10::ScalarType>, "
    "std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, "
    "std::optional<c10::MemoryFormat>)",
    "at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)",
    "at::_ops::zeros::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)",
    "at::_ops::contiguous::call(at::Tensor const&, c10::MemoryFormat)",
    "at::_ops::to_dtype::call(at::Tensor const&, c10::ScalarType, bool, bool)",
    "at::_ops::fill__Scalar::call(at::Tensor&, c10::Scalar const&)",
    "float* at::TensorBase::data_ptr<float>() const",
    "c10::detail::torchCheckFail(char const*, char const*, unsigned int, char const*)",
    "c10::cuda::getCurrentCUDAStream(signed char)",
    "at::cuda::getCurrentDeviceProperties()",
    "at::cuda::warp_size()",
    "pybind11::detail::type_caster<at::Tensor, void>::load(pybind11::handle, bool)",
    "cudaLaunchKernel",
    "__cudaRegisterFunction",
    "PyEval_GetBuiltins",
    "memcpy",
]

# The Python C API: what runs Python, and what every binding imports
PYTHON_RUNS = ["PyImport_ImportModule", "PyRun_SimpleStringFlags", "PyObject_Vectorcall",
               "PyObject_Call", "PyObject_CallObject", "_PyObject_MakeTpCall",
               "Py_CompileString", "PyEval_EvalCode", "PySys_GetObject"]  # fmt: skip
BINDINGS = ["PyObject_CallFunctionObjArgs", "PyEval_GetBuiltins", "PyEval_SaveThread",
            "PyObject_GetAttrString", "PyDict_GetItemWithError", "_PyObject_GetDictPtr",
            "PyGILState_Ensure"]  # fmt: skip

REFUSED = {
    "at::cuda::_softmax_out(at::Tensor&, at::Tensor const&, long, bool)": "beside the dispatcher",
    "at::cpu::relu(at::Tensor const&)": "beside the dispatcher",
    "at::native::softmax_cuda(at::Tensor const&, long, bool)": "beside the dispatcher",
    # a template function's demangling starts with its return type
    "void at::cuda::blas::gemm<float>(char, char, long, long, long, float, float const*)": "beside",
    "at::Tensor at::native::softmax_kernel<float>(at::Tensor const&)": "beside the dispatcher",
    "at::compositeexplicitautograd::add(at::Tensor const&, at::Tensor const&)": "beside",
    "at::_ops::_softmax::call(at::Tensor const&, long, bool)": "an aten op that computes",
    "at::_ops::matmul::call(at::Tensor const&, at::Tensor const&)": "an aten op that computes",
    "at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&, c10::Scalar const&)": "an aten op that computes",
    "c10::Dispatcher::findSchemaOrThrow(char const*, char const*)": "looked up by name",
    "torch::jit::load(std::string const&)": "looked up by name",
    "cublasSgemm_v2": "vendor library",
    "cublasLtMatmul": "vendor library",
    "rocblas_sgemm": "vendor library",
    "miopenSoftmaxForward_V2": "vendor library",
    "nvrtcCompileProgram": "vendor library",
    "cuModuleLoadData": "vendor library",
    "dlsym": "symbol lookup",
    "dl_iterate_phdr": "symbol lookup",
}


@pytest.mark.parametrize("symbol", HONEST)
def test_what_an_honest_extension_imports_passes(symbol: str) -> None:
    assert kb_library_check.reason(symbol) == ""


@pytest.mark.parametrize("symbol", sorted(REFUSED))
def test_compute_that_is_not_the_extensions_own_is_refused_with_its_reason(symbol: str) -> None:
    assert REFUSED[symbol] in kb_library_check.reason(symbol)


@pytest.mark.parametrize(
    ("symbol", "name"),
    [
        ("float* at::TensorBase::data_ptr<float>() const", "at::TensorBase::data_ptr<float>"),
        ("void at::cuda::blas::gemm<float>(char, char)", "at::cuda::blas::gemm<float>"),
        ("at::Foo::operator()(int) const", "at::Foo::operator@"),
        (
            "std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, char const*)",
            "std::operator@ <std::char_traits<char> >",
        ),
        ("cublasSgemm_v2", "cublasSgemm_v2"),
    ],
)
def test_a_demangled_symbol_is_read_without_its_return_type_and_parameters(symbol, name) -> None:
    assert kb_library_check.qualified(symbol) == name


def test_the_python_c_apis_ways_to_run_python_are_told_from_what_bindings_import() -> None:
    assert kb_library_check.python_calls(PYTHON_RUNS + BINDINGS) == frozenset(PYTHON_RUNS)


def test_every_data_op_of_the_screen_has_its_at_ops_names() -> None:
    ops = kb_library_check.data_ops()
    assert {"empty_like", "empty_memory_format", "to_dtype", "copy_", "view", "zero_"} <= ops
    assert not {"_softmax", "relu", "add_Tensor", "mm", "sum"} & ops


# ------------------------------------------------------------------------ built here (CPU)


@pytest.mark.slow
def test_an_aten_kernel_entry_point_under_an_asm_label_is_hacked_and_never_published(tmp_path):
    candidate = load_candidate(
        relu_extension(tmp_path / "c", "hipevolve_test_cpu_relu_backend_entry", BACKEND_ENTRY)
    )
    evaluation = evaluate_on_relu(candidate, tmp_path)
    assert evaluation.status is Status.hacked, (evaluation.status, evaluation.message)
    assert "at::cpu::relu" in evaluation.message and "with PyTorch" in evaluation.message
    assert kernelbench.LESS_ISOLATED in evaluation.flags
    assert not list((tmp_path / "cache" / "kernelbench").glob("*/*.so"))  # nothing published
    again = kernelbench.build(candidate, "cpu", tmp_path / "cache")
    assert not again.ok and "at::cpu::relu" in again.hacked


@pytest.mark.slow
def test_a_python_call_from_the_extension_is_refused_at_the_build_stage(tmp_path):
    assert kernelbench.python_baseline("cpu", tmp_path / "cache") is not None  # the rule is on
    path = relu_extension(tmp_path / "c", "hipevolve_test_cpu_relu_python_call", PYTHON_CALL)
    evaluation = evaluate_on_relu(load_candidate(path), tmp_path)
    assert evaluation.status is Status.hacked, (evaluation.status, evaluation.message)
    assert "PyImport_ImportModule (Python run from the C++" in evaluation.message


@pytest.mark.slow
def test_a_python_call_with_the_bindings_own_imports_is_hacked_by_the_dispatcher_watch(tmp_path):
    path = relu_extension(tmp_path / "c", "hipevolve_test_cpu_relu_python_builtins",
                          PYTHON_CALL_BY_BUILTINS)  # fmt: skip
    evaluation = evaluate_on_relu(load_candidate(path), tmp_path)
    assert evaluation.status is Status.hacked, (evaluation.status, evaluation.message)
    assert "computes aten.relu with PyTorch inside the extension" in evaluation.message
