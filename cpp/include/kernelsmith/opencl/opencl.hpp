// OpenCL runtime: device discovery and selection, a context with an in-order
// profiling queue, cached program builds that return the full build log on
// failure, buffers (zero-copy over host memory on CPU devices), kernel launches
// and event-profiled timing.
//
// Every OpenCL failure throws kernelsmith::OpenCLError whose message names the
// CL status (e.g. CL_INVALID_WORK_GROUP_SIZE) and the call that failed; build
// failures carry the compiler's log, which is the feedback an LLM sees.
//
// Only OpenCL 1.2 entry points are required at run time (NVIDIA reports 3.0 with
// 1.2 features, PoCL 3.0); 2.0+ calls are used only when the platform has them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#ifndef CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#endif
#include <CL/cl.h>

namespace kernelsmith::opencl {

// "CL_INVALID_WORK_GROUP_SIZE" for -54; "CL_UNKNOWN_ERROR(-12345)" otherwise.
std::string error_name(int code);

// Throws OpenCLError "<call> failed: <NAME> (<code>)[: detail]" unless status == CL_SUCCESS.
void check(cl_int status, const std::string& call, const std::string& detail = "");

// Everything a prompt or a result record needs to know about one device.
struct DeviceInfo {
  int platform_index = 0;
  int device_index = 0;  // within its platform
  int global_index = 0;  // across all platforms, in discovery order
  std::string platform_name;
  std::string platform_version;
  std::string name;
  std::string vendor;
  std::string version;  // "OpenCL 3.0 CUDA"
  std::string driver_version;
  std::string opencl_c_version;
  std::string type;  // "gpu", "cpu", "accelerator", "other"
  std::string extensions;
  std::uint32_t max_compute_units = 0;
  std::uint32_t max_clock_mhz = 0;
  std::size_t max_work_group_size = 0;
  std::vector<std::size_t> max_work_item_sizes;
  std::uint64_t local_mem_size = 0;
  bool local_mem_is_dedicated = false;  // CL_LOCAL, not emulated in global memory
  std::uint64_t global_mem_size = 0;
  std::uint64_t max_mem_alloc_size = 0;
  std::uint32_t mem_base_addr_align_bits = 0;
  std::uint32_t preferred_vector_width_char = 0;
  std::uint32_t preferred_vector_width_short = 0;
  std::uint32_t preferred_vector_width_int = 0;
  std::uint32_t preferred_vector_width_long = 0;
  std::uint32_t preferred_vector_width_float = 0;
  std::uint32_t preferred_vector_width_double = 0;
  std::uint32_t preferred_vector_width_half = 0;
  bool has_fp64 = false;
  bool has_fp16 = false;
  bool host_unified_memory = false;
  std::uint64_t profiling_timer_resolution_ns = 0;

  // "0:1 NVIDIA CUDA / NVIDIA H200 (gpu, OpenCL 3.0 CUDA)"
  std::string describe() const;
};

// All devices of all platforms. An ICD loader without platforms yields [].
std::vector<DeviceInfo> list_devices();

// Environment variable consulted when the selector is empty.
inline constexpr const char* kDeviceEnvVar = "KERNELSMITH_OPENCL_DEVICE";

// Picks a device. selector: "" (then $KERNELSMITH_OPENCL_DEVICE, then the first
// GPU, else the first device), "P:D" (platform P, device D), "N" (N-th device
// overall), or a case-insensitive substring of "platform name / platform version /
// device / vendor / type" (so "pocl", "nvidia", "gpu" work). Throws InvalidArgument listing every device when nothing matches.
DeviceInfo select_device(const std::string& selector = "");

// Process-wide count of kernels enqueued through any Context. Only a real
// clEnqueueNDRangeKernel that succeeded increments it, so a launch guard that
// reads it before and after a call knows whether a kernel really ran.
std::uint64_t launch_count();
// Names of the kernels launched after the launch numbered `mark` (the most
// recent 4096 are kept).
std::vector<std::string> launched_since(std::uint64_t mark);

class Context;

// Device memory. A buffer that wraps host memory (zero-copy) aliases it: the
// caller keeps that memory alive for the buffer's lifetime.
class Buffer {
 public:
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  std::size_t size() const { return size_; }
  bool wraps_host() const { return host_ptr_ != nullptr; }
  cl_mem handle() const { return mem_; }

  // Blocking copies between host memory and the buffer.
  void write(const void* source, std::size_t bytes, std::size_t offset = 0);
  void read(void* destination, std::size_t bytes, std::size_t offset = 0) const;
  // For a buffer that wraps host memory: map and unmap it so the host memory is
  // guaranteed to hold what kernels wrote (the spec requires it; free on CPUs).
  void sync_host() const;

 private:
  friend class Context;
  Buffer(std::shared_ptr<Context> context, cl_mem mem, std::size_t size, void* host_ptr);
  std::shared_ptr<Context> context_;
  cl_mem mem_;
  std::size_t size_;
  void* host_ptr_;
};

// One kernel argument: a buffer, a scalar (its bytes, e.g. a float or an
// int32), or a size of local memory.
struct KernelArg {
  enum class Kind { kBuffer, kScalar, kLocal };
  Kind kind = Kind::kScalar;
  cl_mem mem = nullptr;
  std::vector<unsigned char> bytes;
  std::size_t local_bytes = 0;

  static KernelArg buffer(const Buffer& buffer);
  static KernelArg scalar(const void* data, std::size_t size);
  template <typename T>
  static KernelArg value(T v) {
    return scalar(&v, sizeof(T));
  }
  static KernelArg local(std::size_t bytes);
};

// A profiled command (kernel or transfer): its event and what it was.
class Event {
 public:
  Event(cl_event event, std::string name, std::string kind);
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }  // "kernel", "write", "read", "map"
  void wait() const;
  // Device-side duration (CL_PROFILING_COMMAND_END - START) in seconds; waits.
  double seconds() const;
  // Raw profiling counters in nanoseconds (queued, submit, start, end); waits.
  std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t> timestamps_ns() const;

 private:
  cl_event event_;
  std::string name_;
  std::string kind_;
};

class Kernel {
 public:
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  ~Kernel();

  const std::string& name() const { return name_; }
  cl_uint num_args() const { return num_args_; }
  // CL_KERNEL_WORK_GROUP_SIZE and CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE
  // for the context's device.
  std::size_t max_work_group_size() const;
  std::size_t preferred_work_group_multiple() const;

 private:
  friend class Program;
  friend class Context;
  Kernel(cl_device_id device, cl_kernel kernel, std::string name);
  // Kernels and programs hold no Context (the context's program cache holds
  // them); OpenCL's own reference counting keeps the cl_context alive.
  cl_device_id device_;
  cl_kernel kernel_;
  std::string name_;
  cl_uint num_args_ = 0;
  std::mutex launch_mutex_;  // clSetKernelArg + enqueue are one step
};

class Program {
 public:
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program();

  const std::string& build_log() const { return build_log_; }
  const std::string& options() const { return options_; }
  double build_seconds() const { return build_seconds_; }
  std::vector<std::string> kernel_names() const;
  // The kernel called `name` (created once per program and reused). Throws
  // InvalidArgument naming the kernels the program has when it has no such one.
  std::shared_ptr<Kernel> kernel(const std::string& name);

 private:
  friend class Context;
  Program(cl_device_id device, cl_program program, std::string options, std::string build_log,
          double build_seconds);
  cl_device_id device_;
  cl_program program_;
  std::string options_;
  std::string build_log_;
  double build_seconds_;
  std::mutex kernels_mutex_;
  std::map<std::string, std::shared_ptr<Kernel>> kernels_;
};

struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::size_t entries = 0;
  std::uint64_t binary_hits = 0;  // misses served by the shared binary folder
};

class Context : public std::enable_shared_from_this<Context> {
 public:
  // Selects a device (see select_device) and creates a context and an
  // in-order queue with profiling enabled on it.
  static std::shared_ptr<Context> create(const std::string& selector = "");
  static std::shared_ptr<Context> create(const DeviceInfo& device);

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  const DeviceInfo& device() const { return info_; }
  cl_context handle() const { return context_; }
  cl_command_queue queue() const { return queue_; }
  cl_device_id device_id() const { return device_; }

  // Builds (or returns from the cache) a program. The cache key is the source's
  // hash, the device and the options. A failed build throws OpenCLError
  // (CL_BUILD_PROGRAM_FAILURE) whose message holds the full build log.
  //
  // Across processes: when KERNELSMITH_OCL_CACHE names a folder, a build that
  // is not in memory first looks there for a binary written by a trusted
  // builder (store_binary) for exactly this device, options and source;
  // when KERNELSMITH_OCL_CACHE_REQUESTS names a folder, every build from
  // source leaves a request there (the key text) that the trusted side may
  // act on. A worker never writes the shared folder itself.
  std::shared_ptr<Program> build(const std::string& source, const std::string& options = "");
  // Builds from source (no cache) and writes `<key>.bin` and `<key>.key`
  // into `dir` atomically; returns the key. For the trusted builder.
  std::string store_binary(const std::string& source, const std::string& options, const std::string& dir);
  // The text that identifies a build: device, driver, options and source.
  std::string cache_key_text(const std::string& source, const std::string& options) const;
  CacheStats cache_stats() const;
  void clear_cache();

  // Host memory can be shared with the device without copies (CPU devices and
  // devices reporting unified host memory).
  bool host_zero_copy() const;
  std::shared_ptr<Buffer> allocate(std::size_t bytes);
  // A buffer over the caller's host memory (CL_MEM_USE_HOST_PTR); only where
  // host_zero_copy(); the memory must outlive the buffer.
  std::shared_ptr<Buffer> wrap_host(void* host, std::size_t bytes);

  // Sets the arguments and enqueues an NDRange (1-3 dims). `local` empty lets
  // the runtime choose; `offset` empty means zero. Non-blocking: the returned
  // event can be waited on or timed.
  std::shared_ptr<Event> launch(Kernel& kernel, const std::vector<KernelArg>& args,
                                const std::vector<std::size_t>& global,
                                const std::vector<std::size_t>& local = {},
                                const std::vector<std::size_t>& offset = {});
  void finish();

  // Profiled-command recording: between begin_recording() and
  // end_recording(mark), every kernel and transfer event is kept; end returns
  // those recorded since the mark (after waiting for them). Nesting works.
  std::size_t begin_recording();
  std::vector<std::shared_ptr<Event>> end_recording(std::size_t mark);

 private:
  friend class Buffer;
  Context(DeviceInfo info, cl_device_id device);
  void record(const std::shared_ptr<Event>& event);

  DeviceInfo info_;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;

  mutable std::mutex cache_mutex_;
  // key: (source hash, device index, options); the source is kept to rule out
  // hash collisions.
  struct CacheEntry {
    std::string source;
    std::shared_ptr<Program> program;
  };
  std::map<std::tuple<std::uint64_t, int, std::string>, CacheEntry> cache_;
  std::shared_ptr<Program> build_from_source(const std::string& source, const std::string& options);
  std::shared_ptr<Program> load_binary(const std::string& key_text, const std::string& options);
  std::uint64_t hits_ = 0;
  std::uint64_t binary_hits_ = 0;
  std::uint64_t misses_ = 0;

  std::mutex record_mutex_;
  int recording_depth_ = 0;
  std::vector<std::shared_ptr<Event>> recorded_;
};

// Device-side seconds of the kernels `fn` enqueues, one sample per call:
// `warmup` unmeasured calls, then `repetitions` measured ones. The samples feed
// the timing harness (kernelsmith.timing) as externally measured times.
template <typename Fn>
std::vector<double> profile_calls(Context& context, Fn&& fn, int warmup, int repetitions);

}  // namespace kernelsmith::opencl

// ---- template implementation ----
namespace kernelsmith::opencl {
template <typename Fn>
std::vector<double> profile_calls(Context& context, Fn&& fn, int warmup, int repetitions) {
  for (int i = 0; i < warmup; ++i) fn();
  context.finish();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(repetitions > 0 ? repetitions : 0));
  for (int i = 0; i < repetitions; ++i) {
    const std::size_t mark = context.begin_recording();
    fn();
    double total = 0.0;
    for (const auto& event : context.end_recording(mark)) {
      if (event->kind() == "kernel") total += event->seconds();
    }
    samples.push_back(total);
  }
  return samples;
}
}  // namespace kernelsmith::opencl
