#include "common.hpp"

#ifndef KERNELSMITH_VERSION
#define KERNELSMITH_VERSION "0.0.0"
#endif

PYBIND11_MODULE(_core, m) {
  m.doc() = "kernelsmith C++ core: evolution engine, timing statistics, code edits, OpenCL runtime";
  m.attr("__version__") = KERNELSMITH_VERSION;
  using namespace kernelsmith::bindings;
  init_errors(m);
  init_logging(m);
  init_engine(m);
  init_timing(m);
  init_edit(m);
  init_opencl(m);
  init_curate(m);
  init_syscall_filter(m);
}
