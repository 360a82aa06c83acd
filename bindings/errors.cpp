#include <pybind11/pybind11.h>

#include "common.hpp"
#include "kernelsmith/error.hpp"

namespace kernelsmith::bindings {

namespace {
// Translators are plain function pointers, so the type lives in a global.
PyObject* g_opencl_error_type = nullptr;
PyObject* g_corrupt_error_type = nullptr;
PyObject* g_base_error_type = nullptr;

py::object located(PyObject* type, const Error& e) {
  py::object error = py::reinterpret_borrow<py::object>(type)(e.message());
  const std::string full = e.what();
  error.attr("cpp_location") = full.size() > e.message().size() ? full.substr(e.message().size() + 1) : "";
  return error;
}
}  // namespace

void init_errors(py::module_& m) {
  // Translators run newest first, so the most specific ones are registered
  // last. InvalidArgument becomes ValueError; everything else derives from
  // KernelsmithError (itself a RuntimeError).
  //
  // Python sees the message alone: these texts reach users (CLI errors,
  // evaluation feedback, prompts), where a C++ source path means nothing.
  // The location stays on the exception as .cpp_location for debugging.
  auto& base = py::register_exception<Error>(m, "KernelsmithError", PyExc_RuntimeError);
  g_base_error_type = base.ptr();
  g_corrupt_error_type = py::register_exception<CorruptState>(m, "CorruptStateError", base.ptr()).ptr();
  auto& opencl = py::register_exception<OpenCLError>(m, "OpenCLError", base.ptr());
  g_opencl_error_type = opencl.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OpenCLError& e) {
      // Carry the numeric CL status as .code for programmatic handling.
      py::object error = located(g_opencl_error_type, e);
      error.attr("code") = e.code();
      PyErr_SetObject(g_opencl_error_type, error.ptr());
    } catch (const CorruptState& e) {
      PyErr_SetObject(g_corrupt_error_type, located(g_corrupt_error_type, e).ptr());
    } catch (const InvalidArgument& e) {
      PyErr_SetObject(PyExc_ValueError, located(PyExc_ValueError, e).ptr());
    } catch (const Error& e) {
      PyErr_SetObject(g_base_error_type, located(g_base_error_type, e).ptr());
    }
  });
}

}  // namespace kernelsmith::bindings
