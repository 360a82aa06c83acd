#include <pybind11/pybind11.h>

#include "common.hpp"
#include "kernelsmith/error.hpp"

namespace kernelsmith::bindings {

namespace {
// Translators are plain function pointers, so the type lives in a global.
PyObject* g_opencl_error_type = nullptr;
}  // namespace

void init_errors(py::module_& m) {
  // Translators run newest first, so the most specific ones are registered
  // last. InvalidArgument becomes ValueError; everything else derives from
  // KernelsmithError (itself a RuntimeError).
  auto& base = py::register_exception<Error>(m, "KernelsmithError", PyExc_RuntimeError);
  py::register_exception<CorruptState>(m, "CorruptStateError", base.ptr());
  auto& opencl = py::register_exception<OpenCLError>(m, "OpenCLError", base.ptr());
  g_opencl_error_type = opencl.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OpenCLError& e) {
      // Carry the numeric CL status as .code for programmatic handling.
      py::object error = py::reinterpret_borrow<py::object>(g_opencl_error_type)(e.what());
      error.attr("code") = e.code();
      PyErr_SetObject(g_opencl_error_type, error.ptr());
    }
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace kernelsmith::bindings
