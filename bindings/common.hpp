// Shared declarations for the binding files. Each subsystem has its own file
// with one init_* function; module.cpp calls them in order. Bindings convert
// types and release the GIL around long calls; they hold no logic.
#pragma once

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace kernelsmith::bindings {

void init_errors(py::module_& m);
void init_logging(py::module_& m);
void init_engine(py::module_& m);
void init_timing(py::module_& m);
void init_edit(py::module_& m);
void init_opencl(py::module_& m);
void init_curate(py::module_& m);
void init_syscall_filter(py::module_& m);

}  // namespace kernelsmith::bindings
