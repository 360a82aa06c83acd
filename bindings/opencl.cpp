// Bindings of the OpenCL runtime as kernelsmith._core.opencl. The friendly
// front end (NumPy / torch conversion, argument typing) is
// python/kernelsmith/opencl.py; this file only converts and releases the GIL
// around builds, launches, copies and waits.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "kernelsmith/error.hpp"
#include "kernelsmith/opencl/opencl.hpp"

namespace kernelsmith::bindings {

namespace {

namespace ocl = kernelsmith::opencl;
using release_gil = py::call_guard<py::gil_scoped_release>;

py::dict device_dict(const ocl::DeviceInfo& d) {
  py::dict out;
  out["platform_index"] = d.platform_index;
  out["device_index"] = d.device_index;
  out["global_index"] = d.global_index;
  out["platform_name"] = d.platform_name;
  out["platform_version"] = d.platform_version;
  out["name"] = d.name;
  out["vendor"] = d.vendor;
  out["version"] = d.version;
  out["driver_version"] = d.driver_version;
  out["opencl_c_version"] = d.opencl_c_version;
  out["type"] = d.type;
  out["max_compute_units"] = d.max_compute_units;
  out["max_clock_mhz"] = d.max_clock_mhz;
  out["max_work_group_size"] = d.max_work_group_size;
  out["max_work_item_sizes"] = d.max_work_item_sizes;
  out["local_mem_size"] = d.local_mem_size;
  out["local_mem_is_dedicated"] = d.local_mem_is_dedicated;
  out["global_mem_size"] = d.global_mem_size;
  out["max_mem_alloc_size"] = d.max_mem_alloc_size;
  out["mem_base_addr_align_bits"] = d.mem_base_addr_align_bits;
  out["preferred_vector_width_char"] = d.preferred_vector_width_char;
  out["preferred_vector_width_short"] = d.preferred_vector_width_short;
  out["preferred_vector_width_int"] = d.preferred_vector_width_int;
  out["preferred_vector_width_long"] = d.preferred_vector_width_long;
  out["preferred_vector_width_float"] = d.preferred_vector_width_float;
  out["preferred_vector_width_double"] = d.preferred_vector_width_double;
  out["preferred_vector_width_half"] = d.preferred_vector_width_half;
  out["has_fp64"] = d.has_fp64;
  out["has_fp16"] = d.has_fp16;
  out["host_unified_memory"] = d.host_unified_memory;
  out["profiling_timer_resolution_ns"] = d.profiling_timer_resolution_ns;
  out["extensions"] = d.extensions;
  return out;
}

// A C-contiguous view of a Python buffer, with its byte size.
py::buffer_info contiguous(const py::buffer& buffer, bool writable, const char* what) {
  py::buffer_info info = buffer.request(writable);
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    KS_REQUIRE(info.strides[static_cast<std::size_t>(d)] == expected,
               what << ": the array must be C-contiguous (use numpy.ascontiguousarray or "
                       "tensor.contiguous())");
    expected *= info.shape[static_cast<std::size_t>(d)];
  }
  return info;
}

std::size_t nbytes(const py::buffer_info& info) {
  return static_cast<std::size_t>(info.size * info.itemsize);
}

}  // namespace

void init_opencl(py::module_& parent) {
  py::module_ m = parent.def_submodule("opencl", "OpenCL runtime (C++); see kernelsmith.opencl");

  m.attr("DEVICE_ENV_VAR") = ocl::kDeviceEnvVar;
  m.def("error_name", &ocl::error_name, py::arg("code"),
        "Name of an OpenCL status code, e.g. -54 -> 'CL_INVALID_WORK_GROUP_SIZE'.");
  m.def(
      "list_devices",
      [] {
        py::list out;
        for (const auto& d : ocl::list_devices()) out.append(device_dict(d));
        return out;
      },
      "Every device of every platform, as dicts of their reported properties.");
  m.def(
      "select_device", [](const std::string& selector) { return device_dict(ocl::select_device(selector)); },
      py::arg("selector") = "",
      "The device a selector picks ('' -> $KERNELSMITH_OPENCL_DEVICE, then first GPU, then "
      "first device; 'P:D'; 'N'; or a name substring).");
  m.def("launch_count", &ocl::launch_count, "Process-wide number of kernels enqueued successfully.");
  m.def("launched_since", &ocl::launched_since, py::arg("mark"),
        "Names of kernels launched after launch number `mark`.");

  py::class_<ocl::Event, std::shared_ptr<ocl::Event>>(m, "Event")
      .def_property_readonly("name", &ocl::Event::name)
      .def_property_readonly("kind", &ocl::Event::kind)
      .def("wait", &ocl::Event::wait, release_gil())
      .def("seconds", &ocl::Event::seconds, release_gil(),
           "Device-side duration (profiling END - START) in seconds; waits for the command.")
      .def("timestamps_ns", &ocl::Event::timestamps_ns, release_gil());

  py::class_<ocl::Buffer, std::shared_ptr<ocl::Buffer>>(m, "Buffer")
      .def_property_readonly("size", &ocl::Buffer::size)
      .def_property_readonly("wraps_host", &ocl::Buffer::wraps_host)
      .def(
          "write",
          [](ocl::Buffer& self, const py::buffer& source, std::size_t offset) {
            py::buffer_info info = contiguous(source, false, "Buffer.write");
            py::gil_scoped_release release;
            self.write(info.ptr, nbytes(info), offset);
          },
          py::arg("source"), py::arg("offset") = 0, "Blocking copy from a host array.")
      .def(
          "read",
          [](const ocl::Buffer& self, const py::buffer& destination, std::size_t offset) {
            py::buffer_info info = contiguous(destination, true, "Buffer.read");
            py::gil_scoped_release release;
            self.read(info.ptr, nbytes(info), offset);
          },
          py::arg("destination"), py::arg("offset") = 0, "Blocking copy into a writable host array.")
      .def("sync_host", &ocl::Buffer::sync_host, release_gil());

  py::class_<ocl::KernelArg>(m, "KernelArg")
      .def_static("buffer", &ocl::KernelArg::buffer, py::arg("buffer"))
      .def_static(
          "scalar",
          [](const py::bytes& data) {
            const std::string bytes = data;
            return ocl::KernelArg::scalar(bytes.data(), bytes.size());
          },
          py::arg("data"), "A by-value argument from its raw bytes (e.g. numpy.int32(3).tobytes()).")
      .def_static("local", &ocl::KernelArg::local, py::arg("nbytes"));

  py::class_<ocl::Kernel, std::shared_ptr<ocl::Kernel>>(m, "Kernel")
      .def_property_readonly("name", &ocl::Kernel::name)
      .def_property_readonly("num_args", &ocl::Kernel::num_args)
      .def_property_readonly("max_work_group_size", &ocl::Kernel::max_work_group_size)
      .def_property_readonly("preferred_work_group_multiple", &ocl::Kernel::preferred_work_group_multiple);

  py::class_<ocl::Program, std::shared_ptr<ocl::Program>>(m, "Program")
      .def_property_readonly("build_log", &ocl::Program::build_log)
      .def_property_readonly("options", &ocl::Program::options)
      .def_property_readonly("build_seconds", &ocl::Program::build_seconds)
      .def("kernel_names", &ocl::Program::kernel_names)
      .def("kernel", &ocl::Program::kernel, py::arg("name"), release_gil());

  py::class_<ocl::Context, std::shared_ptr<ocl::Context>>(m, "Context")
      .def(py::init([](const std::string& selector) { return ocl::Context::create(selector); }),
           py::arg("selector") = "", release_gil())
      .def_property_readonly("device", [](const ocl::Context& self) { return device_dict(self.device()); })
      .def_property_readonly("host_zero_copy", &ocl::Context::host_zero_copy)
      .def("build", &ocl::Context::build, py::arg("source"), py::arg("options") = "", release_gil(),
           "Build (or fetch from the cache) a program; raises OpenCLError with the build log.")
      .def("cache_stats",
           [](const ocl::Context& self) {
             const auto stats = self.cache_stats();
             py::dict out;
             out["hits"] = stats.hits;
             out["misses"] = stats.misses;
             out["entries"] = stats.entries;
             out["binary_hits"] = stats.binary_hits;
             return out;
           })
      .def("clear_cache", &ocl::Context::clear_cache, release_gil())
      .def("store_binary", &ocl::Context::store_binary, py::arg("source"), py::arg("options"), py::arg("dir"),
           release_gil(),
           "Build from source and write the binary cache entry into dir (the trusted builder).")
      .def("cache_key_text", &ocl::Context::cache_key_text, py::arg("source"), py::arg("options") = "")
      .def("allocate", &ocl::Context::allocate, py::arg("nbytes"), release_gil())
      .def(
          "wrap_host",
          [](ocl::Context& self, const py::buffer& host) {
            py::buffer_info info = contiguous(host, true, "Context.wrap_host");
            return self.wrap_host(info.ptr, nbytes(info));
          },
          py::arg("host"), py::keep_alive<0, 2>(),
          "A zero-copy buffer over a writable, C-contiguous host array (CPU devices only); the "
          "array is kept alive as long as the buffer.")
      .def("launch", &ocl::Context::launch, py::arg("kernel"), py::arg("args"), py::arg("global_size"),
           py::arg("local_size") = std::vector<std::size_t>{}, py::arg("offset") = std::vector<std::size_t>{},
           release_gil())
      .def("finish", &ocl::Context::finish, release_gil())
      .def("begin_recording", &ocl::Context::begin_recording)
      .def("end_recording", &ocl::Context::end_recording, py::arg("mark"), release_gil());
}

}  // namespace kernelsmith::bindings
