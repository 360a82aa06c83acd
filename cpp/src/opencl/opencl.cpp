#include "kernelsmith/opencl/opencl.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <sstream>
#include <utility>

#include <unistd.h>

#include "kernelsmith/error.hpp"
#include "kernelsmith/log.hpp"

namespace kernelsmith::opencl {

namespace {

#define KS_CL_NAME(code) \
  case code: return #code;

const char* known_error_name(int code) {
  switch (code) {
    KS_CL_NAME(CL_SUCCESS)
    KS_CL_NAME(CL_DEVICE_NOT_FOUND)
    KS_CL_NAME(CL_DEVICE_NOT_AVAILABLE)
    KS_CL_NAME(CL_COMPILER_NOT_AVAILABLE)
    KS_CL_NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    KS_CL_NAME(CL_OUT_OF_RESOURCES)
    KS_CL_NAME(CL_OUT_OF_HOST_MEMORY)
    KS_CL_NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
    KS_CL_NAME(CL_MEM_COPY_OVERLAP)
    KS_CL_NAME(CL_IMAGE_FORMAT_MISMATCH)
    KS_CL_NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    KS_CL_NAME(CL_BUILD_PROGRAM_FAILURE)
    KS_CL_NAME(CL_MAP_FAILURE)
    KS_CL_NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    KS_CL_NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    KS_CL_NAME(CL_COMPILE_PROGRAM_FAILURE)
    KS_CL_NAME(CL_LINKER_NOT_AVAILABLE)
    KS_CL_NAME(CL_LINK_PROGRAM_FAILURE)
    KS_CL_NAME(CL_DEVICE_PARTITION_FAILED)
    KS_CL_NAME(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    KS_CL_NAME(CL_INVALID_VALUE)
    KS_CL_NAME(CL_INVALID_DEVICE_TYPE)
    KS_CL_NAME(CL_INVALID_PLATFORM)
    KS_CL_NAME(CL_INVALID_DEVICE)
    KS_CL_NAME(CL_INVALID_CONTEXT)
    KS_CL_NAME(CL_INVALID_QUEUE_PROPERTIES)
    KS_CL_NAME(CL_INVALID_COMMAND_QUEUE)
    KS_CL_NAME(CL_INVALID_HOST_PTR)
    KS_CL_NAME(CL_INVALID_MEM_OBJECT)
    KS_CL_NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    KS_CL_NAME(CL_INVALID_IMAGE_SIZE)
    KS_CL_NAME(CL_INVALID_SAMPLER)
    KS_CL_NAME(CL_INVALID_BINARY)
    KS_CL_NAME(CL_INVALID_BUILD_OPTIONS)
    KS_CL_NAME(CL_INVALID_PROGRAM)
    KS_CL_NAME(CL_INVALID_PROGRAM_EXECUTABLE)
    KS_CL_NAME(CL_INVALID_KERNEL_NAME)
    KS_CL_NAME(CL_INVALID_KERNEL_DEFINITION)
    KS_CL_NAME(CL_INVALID_KERNEL)
    KS_CL_NAME(CL_INVALID_ARG_INDEX)
    KS_CL_NAME(CL_INVALID_ARG_VALUE)
    KS_CL_NAME(CL_INVALID_ARG_SIZE)
    KS_CL_NAME(CL_INVALID_KERNEL_ARGS)
    KS_CL_NAME(CL_INVALID_WORK_DIMENSION)
    KS_CL_NAME(CL_INVALID_WORK_GROUP_SIZE)
    KS_CL_NAME(CL_INVALID_WORK_ITEM_SIZE)
    KS_CL_NAME(CL_INVALID_GLOBAL_OFFSET)
    KS_CL_NAME(CL_INVALID_EVENT_WAIT_LIST)
    KS_CL_NAME(CL_INVALID_EVENT)
    KS_CL_NAME(CL_INVALID_OPERATION)
    KS_CL_NAME(CL_INVALID_GL_OBJECT)
    KS_CL_NAME(CL_INVALID_BUFFER_SIZE)
    KS_CL_NAME(CL_INVALID_MIP_LEVEL)
    KS_CL_NAME(CL_INVALID_GLOBAL_WORK_SIZE)
    KS_CL_NAME(CL_INVALID_PROPERTY)
    KS_CL_NAME(CL_INVALID_IMAGE_DESCRIPTOR)
    KS_CL_NAME(CL_INVALID_COMPILER_OPTIONS)
    KS_CL_NAME(CL_INVALID_LINKER_OPTIONS)
    KS_CL_NAME(CL_INVALID_DEVICE_PARTITION_COUNT)
    KS_CL_NAME(CL_INVALID_PIPE_SIZE)
    KS_CL_NAME(CL_INVALID_DEVICE_QUEUE)
    KS_CL_NAME(CL_INVALID_SPEC_ID)
    KS_CL_NAME(CL_MAX_SIZE_RESTRICTION_EXCEEDED)
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    // NVIDIA reports a kernel fault (illegal address, ...) this way.
    case -9999: return "CL_NV_KERNEL_ILLEGAL_BUFFER_READ_WRITE";
    default: return nullptr;
  }
}
#undef KS_CL_NAME

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

// Compilers name the source by a temporary path (PoCL: ".../kcache/tempfile_Ab12.cl:5:27:");
// the LLM needs the line and column, not the path, which also differs per run.
std::string clean_build_log(const std::string& log) {
  std::string out;
  out.reserve(log.size());
  std::size_t pos = 0;
  while (true) {
    const std::size_t hit = log.find(".cl:", pos);
    if (hit == std::string::npos) break;
    std::size_t begin = hit;
    while (begin > pos && !std::isspace(static_cast<unsigned char>(log[begin - 1]))) --begin;
    const std::string token = log.substr(begin, hit - begin);
    out.append(log, pos, begin - pos);
    out += token.find('/') != std::string::npos ? std::string("kernel") : token;
    out += ".cl:";
    pos = hit + 4;
  }
  out.append(log, pos, std::string::npos);
  return out;
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  std::size_t size = 0;
  check(clGetPlatformInfo(platform, what, 0, nullptr, &size), "clGetPlatformInfo");
  std::string value(size, '\0');
  check(clGetPlatformInfo(platform, what, size, value.data(), nullptr), "clGetPlatformInfo");
  return trim(std::string(value.c_str()));
}

std::string device_string(cl_device_id device, cl_device_info what) {
  std::size_t size = 0;
  if (clGetDeviceInfo(device, what, 0, nullptr, &size) != CL_SUCCESS) return "";
  std::string value(size, '\0');
  if (clGetDeviceInfo(device, what, size, value.data(), nullptr) != CL_SUCCESS) return "";
  return trim(std::string(value.c_str()));
}

// Optional properties (deprecated or vendor-specific ones) read as 0 when the
// driver does not answer, rather than failing discovery.
template <typename T>
T device_value(cl_device_id device, cl_device_info what) {
  T value{};
  if (clGetDeviceInfo(device, what, sizeof(T), &value, nullptr) != CL_SUCCESS) return T{};
  return value;
}

std::vector<cl_platform_id> platforms() {
  cl_uint count = 0;
  const cl_int status = clGetPlatformIDs(0, nullptr, &count);
  // The ICD loader answers CL_PLATFORM_NOT_FOUND_KHR when no vendor is installed.
  if (status == -1001 || count == 0) return {};
  check(status, "clGetPlatformIDs");
  std::vector<cl_platform_id> ids(count);
  check(clGetPlatformIDs(count, ids.data(), nullptr), "clGetPlatformIDs");
  return ids;
}

std::vector<cl_device_id> devices_of(cl_platform_id platform) {
  cl_uint count = 0;
  const cl_int status = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &count);
  if (status == CL_DEVICE_NOT_FOUND || count == 0) return {};
  check(status, "clGetDeviceIDs");
  std::vector<cl_device_id> ids(count);
  check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, ids.data(), nullptr), "clGetDeviceIDs");
  return ids;
}

DeviceInfo describe_device(cl_platform_id platform, cl_device_id device) {
  DeviceInfo info;
  info.platform_name = platform_string(platform, CL_PLATFORM_NAME);
  info.platform_version = platform_string(platform, CL_PLATFORM_VERSION);
  info.name = device_string(device, CL_DEVICE_NAME);
  info.vendor = device_string(device, CL_DEVICE_VENDOR);
  info.version = device_string(device, CL_DEVICE_VERSION);
  info.driver_version = device_string(device, CL_DRIVER_VERSION);
  info.opencl_c_version = device_string(device, CL_DEVICE_OPENCL_C_VERSION);
  info.extensions = device_string(device, CL_DEVICE_EXTENSIONS);
  const auto type = device_value<cl_device_type>(device, CL_DEVICE_TYPE);
  info.type = (type & CL_DEVICE_TYPE_GPU)           ? "gpu"
              : (type & CL_DEVICE_TYPE_CPU)         ? "cpu"
              : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                    : "other";
  info.max_compute_units = device_value<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS);
  info.max_clock_mhz = device_value<cl_uint>(device, CL_DEVICE_MAX_CLOCK_FREQUENCY);
  info.max_work_group_size = device_value<std::size_t>(device, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  const auto dims = device_value<cl_uint>(device, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS);
  if (dims > 0) {
    info.max_work_item_sizes.resize(dims);
    check(clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(std::size_t) * dims,
                          info.max_work_item_sizes.data(), nullptr),
          "clGetDeviceInfo", "CL_DEVICE_MAX_WORK_ITEM_SIZES");
  }
  info.local_mem_size = device_value<cl_ulong>(device, CL_DEVICE_LOCAL_MEM_SIZE);
  info.local_mem_is_dedicated = device_value<cl_device_local_mem_type>(device, CL_DEVICE_LOCAL_MEM_TYPE) ==
                                CL_LOCAL;
  info.global_mem_size = device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE);
  info.max_mem_alloc_size = device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  info.mem_base_addr_align_bits = device_value<cl_uint>(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN);
  info.preferred_vector_width_char = device_value<cl_uint>(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_CHAR);
  info.preferred_vector_width_short = device_value<cl_uint>(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_SHORT);
  info.preferred_vector_width_int = device_value<cl_uint>(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_INT);
  info.preferred_vector_width_long = device_value<cl_uint>(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_LONG);
  info.preferred_vector_width_float = device_value<cl_uint>(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT);
  info.preferred_vector_width_double = device_value<cl_uint>(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE);
  info.preferred_vector_width_half = device_value<cl_uint>(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF);
  info.has_fp64 = device_value<cl_device_fp_config>(device, CL_DEVICE_DOUBLE_FP_CONFIG) != 0 ||
                  info.extensions.find("cl_khr_fp64") != std::string::npos;
  info.has_fp16 = info.extensions.find("cl_khr_fp16") != std::string::npos;
  info.host_unified_memory = device_value<cl_bool>(device, CL_DEVICE_HOST_UNIFIED_MEMORY) == CL_TRUE;
  info.profiling_timer_resolution_ns =
      device_value<std::size_t>(device, CL_DEVICE_PROFILING_TIMER_RESOLUTION);
  return info;
}

// Major*10+minor from "OpenCL 3.0 ..."; 12 when it cannot be read.
int platform_version_number(const std::string& version) {
  int major = 1, minor = 2;
  if (std::sscanf(version.c_str(), "OpenCL %d.%d", &major, &minor) != 2) return 12;
  return major * 10 + minor;
}

// Found devices paired with their handles, in discovery order.
struct Found {
  DeviceInfo info;
  cl_platform_id platform;
  cl_device_id device;
};

std::vector<Found> discover() {
  std::vector<Found> found;
  int global = 0;
  const auto platform_ids = platforms();
  for (std::size_t p = 0; p < platform_ids.size(); ++p) {
    const auto device_ids = devices_of(platform_ids[p]);
    for (std::size_t d = 0; d < device_ids.size(); ++d) {
      DeviceInfo info = describe_device(platform_ids[p], device_ids[d]);
      info.platform_index = static_cast<int>(p);
      info.device_index = static_cast<int>(d);
      info.global_index = global++;
      found.push_back({std::move(info), platform_ids[p], device_ids[d]});
    }
  }
  return found;
}

bool parse_int(const std::string& text, int& value) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), ::isdigit)) return false;
  value = std::atoi(text.c_str());
  return true;
}

const Found& select_found(const std::vector<Found>& found, const std::string& requested) {
  std::string selector = trim(requested);
  std::string origin = "selector";
  if (selector.empty()) {
    if (const char* env = std::getenv(kDeviceEnvVar); env != nullptr && *env != '\0') {
      selector = trim(env);
      origin = kDeviceEnvVar;
    }
  }
  auto listing = [&found]() {
    std::ostringstream out;
    if (found.empty()) {
      out << " (no OpenCL devices found: is an ICD installed, e.g. pocl-opencl-icd, or "
             "OCL_ICD_VENDORS set to a folder of .icd files?)";
    } else {
      out << "; available devices:";
      for (const auto& f : found) out << "\n  " << f.info.describe();
    }
    return out.str();
  };
  if (found.empty()) KS_THROW(InvalidArgument, "no OpenCL device to select" << listing());
  if (selector.empty()) {
    for (const auto& f : found)
      if (f.info.type == "gpu") return f;
    return found.front();
  }
  // "P:D"
  if (const auto colon = selector.find(':'); colon != std::string::npos) {
    int p = 0, d = 0;
    if (parse_int(selector.substr(0, colon), p) && parse_int(selector.substr(colon + 1), d)) {
      for (const auto& f : found)
        if (f.info.platform_index == p && f.info.device_index == d) return f;
      KS_THROW(InvalidArgument,
               "OpenCL device '" << selector << "' (from " << origin << ") does not exist" << listing());
    }
  }
  // "N"
  int n = 0;
  if (parse_int(selector, n)) {
    for (const auto& f : found)
      if (f.info.global_index == n) return f;
    KS_THROW(InvalidArgument,
             "OpenCL device index " << n << " (from " << origin << ") does not exist" << listing());
  }
  const std::string needle = lower(selector);
  for (const auto& f : found) {
    // Platform version too: PoCL names itself there ("OpenCL 3.0 PoCL ..."),
    // not in its platform name ("Portable Computing Language").
    const std::string haystack = lower(f.info.platform_name + " / " + f.info.platform_version + " / " +
                                       f.info.name + " / " + f.info.vendor + " / " + f.info.type);
    if (haystack.find(needle) != std::string::npos) return f;
  }
  KS_THROW(InvalidArgument,
           "no OpenCL device matches '" << selector << "' (from " << origin << ")" << listing());
}

// The process-wide launch log behind launch_count() / launched_since().
struct LaunchLog {
  std::mutex mutex;
  std::uint64_t count = 0;
  std::deque<std::string> recent;  // names of launches (count - recent.size(), count]
  static constexpr std::size_t kKeep = 4096;

  void add(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    ++count;
    recent.push_back(name);
    if (recent.size() > kKeep) recent.pop_front();
  }
};

LaunchLog& launch_log() {
  static LaunchLog log;
  return log;
}

}  // namespace

std::string error_name(int code) {
  if (const char* name = known_error_name(code)) return name;
  return "CL_UNKNOWN_ERROR(" + std::to_string(code) + ")";
}

void check(cl_int status, const std::string& call, const std::string& detail) {
  if (status == CL_SUCCESS) return;
  std::ostringstream out;
  out << call << " failed: " << error_name(status) << " (" << status << ")";
  if (!detail.empty()) out << ": " << detail;
  throw OpenCLError(out.str(), status, __FILE__, __LINE__, call.c_str());
}

std::string DeviceInfo::describe() const {
  std::ostringstream out;
  out << platform_index << ":" << device_index << " " << platform_name << " / " << name << " (" << type
      << ", " << version << ")";
  return out.str();
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  for (auto& f : discover()) out.push_back(std::move(f.info));
  return out;
}

DeviceInfo select_device(const std::string& selector) {
  const auto found = discover();
  return select_found(found, selector).info;
}

std::uint64_t launch_count() {
  auto& log = launch_log();
  std::lock_guard<std::mutex> lock(log.mutex);
  return log.count;
}

std::vector<std::string> launched_since(std::uint64_t mark) {
  auto& log = launch_log();
  std::lock_guard<std::mutex> lock(log.mutex);
  if (mark >= log.count) return {};
  const std::uint64_t wanted = log.count - mark;
  const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(wanted, log.recent.size()));
  return std::vector<std::string>(log.recent.end() - static_cast<std::ptrdiff_t>(take), log.recent.end());
}

// ---- Buffer ----

Buffer::Buffer(std::shared_ptr<Context> context, cl_mem mem, std::size_t size, void* host_ptr)
    : context_(std::move(context)), mem_(mem), size_(size), host_ptr_(host_ptr) {}

Buffer::~Buffer() {
  if (mem_ != nullptr) clReleaseMemObject(mem_);
}

void Buffer::write(const void* source, std::size_t bytes, std::size_t offset) {
  KS_REQUIRE(offset + bytes <= size_, "write of " << bytes << " bytes at offset " << offset
                                                  << " overruns a buffer of " << size_ << " bytes");
  if (bytes == 0) return;
  cl_event event = nullptr;
  check(clEnqueueWriteBuffer(context_->queue(), mem_, CL_TRUE, offset, bytes, source, 0, nullptr, &event),
        "clEnqueueWriteBuffer");
  context_->record(std::make_shared<Event>(event, "write", "write"));
}

void Buffer::read(void* destination, std::size_t bytes, std::size_t offset) const {
  KS_REQUIRE(offset + bytes <= size_, "read of " << bytes << " bytes at offset " << offset
                                                 << " overruns a buffer of " << size_ << " bytes");
  if (bytes == 0) return;
  cl_event event = nullptr;
  check(clEnqueueReadBuffer(context_->queue(), mem_, CL_TRUE, offset, bytes, destination, 0, nullptr, &event),
        "clEnqueueReadBuffer");
  context_->record(std::make_shared<Event>(event, "read", "read"));
}

void Buffer::sync_host() const {
  if (host_ptr_ == nullptr || size_ == 0) return;
  cl_int status = CL_SUCCESS;
  cl_event event = nullptr;
  void* mapped = clEnqueueMapBuffer(context_->queue(), mem_, CL_TRUE, CL_MAP_READ, 0, size_, 0, nullptr,
                                    &event, &status);
  check(status, "clEnqueueMapBuffer");
  context_->record(std::make_shared<Event>(event, "map", "map"));
  check(clEnqueueUnmapMemObject(context_->queue(), mem_, mapped, 0, nullptr, nullptr),
        "clEnqueueUnmapMemObject");
  check(clFinish(context_->queue()), "clFinish");
}

// ---- KernelArg ----

KernelArg KernelArg::buffer(const Buffer& buffer) {
  KernelArg arg;
  arg.kind = Kind::kBuffer;
  arg.mem = buffer.handle();
  return arg;
}

KernelArg KernelArg::scalar(const void* data, std::size_t size) {
  KS_REQUIRE(size > 0 && size <= 128, "a scalar kernel argument must be 1..128 bytes, got " << size);
  KernelArg arg;
  arg.kind = Kind::kScalar;
  const auto* bytes = static_cast<const unsigned char*>(data);
  arg.bytes.assign(bytes, bytes + size);
  return arg;
}

KernelArg KernelArg::local(std::size_t bytes) {
  KS_REQUIRE(bytes > 0, "a local-memory kernel argument needs a size > 0 bytes");
  KernelArg arg;
  arg.kind = Kind::kLocal;
  arg.local_bytes = bytes;
  return arg;
}

// ---- Event ----

Event::Event(cl_event event, std::string name, std::string kind)
    : event_(event), name_(std::move(name)), kind_(std::move(kind)) {}

Event::~Event() {
  if (event_ != nullptr) clReleaseEvent(event_);
}

void Event::wait() const { check(clWaitForEvents(1, &event_), "clWaitForEvents", name_); }

std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t> Event::timestamps_ns() const {
  wait();
  cl_ulong queued = 0, submit = 0, start = 0, end = 0;
  check(clGetEventProfilingInfo(event_, CL_PROFILING_COMMAND_QUEUED, sizeof(queued), &queued, nullptr),
        "clGetEventProfilingInfo", name_);
  check(clGetEventProfilingInfo(event_, CL_PROFILING_COMMAND_SUBMIT, sizeof(submit), &submit, nullptr),
        "clGetEventProfilingInfo", name_);
  check(clGetEventProfilingInfo(event_, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr),
        "clGetEventProfilingInfo", name_);
  check(clGetEventProfilingInfo(event_, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr),
        "clGetEventProfilingInfo", name_);
  return {queued, submit, start, end};
}

double Event::seconds() const {
  const auto [queued, submit, start, end] = timestamps_ns();
  (void)queued;
  (void)submit;
  return end > start ? static_cast<double>(end - start) * 1e-9 : 0.0;
}

// ---- Kernel ----

Kernel::Kernel(cl_device_id device, cl_kernel kernel, std::string name)
    : device_(device), kernel_(kernel), name_(std::move(name)) {
  check(clGetKernelInfo(kernel_, CL_KERNEL_NUM_ARGS, sizeof(num_args_), &num_args_, nullptr),
        "clGetKernelInfo", name_);
}

Kernel::~Kernel() {
  if (kernel_ != nullptr) clReleaseKernel(kernel_);
}

std::size_t Kernel::max_work_group_size() const {
  std::size_t value = 0;
  check(clGetKernelWorkGroupInfo(kernel_, device_, CL_KERNEL_WORK_GROUP_SIZE, sizeof(value), &value, nullptr),
        "clGetKernelWorkGroupInfo", name_);
  return value;
}

std::size_t Kernel::preferred_work_group_multiple() const {
  std::size_t value = 0;
  check(clGetKernelWorkGroupInfo(kernel_, device_, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                 sizeof(value), &value, nullptr),
        "clGetKernelWorkGroupInfo", name_);
  return value;
}

// ---- Program ----

Program::Program(cl_device_id device, cl_program program, std::string options, std::string build_log,
                 double build_seconds)
    : device_(device),
      program_(program),
      options_(std::move(options)),
      build_log_(std::move(build_log)),
      build_seconds_(build_seconds) {}

Program::~Program() {
  kernels_.clear();
  if (program_ != nullptr) clReleaseProgram(program_);
}

std::vector<std::string> Program::kernel_names() const {
  std::size_t size = 0;
  check(clGetProgramInfo(program_, CL_PROGRAM_KERNEL_NAMES, 0, nullptr, &size), "clGetProgramInfo");
  std::string names(size, '\0');
  check(clGetProgramInfo(program_, CL_PROGRAM_KERNEL_NAMES, size, names.data(), nullptr), "clGetProgramInfo");
  std::vector<std::string> out;
  std::stringstream stream(std::string(names.c_str()));
  std::string name;
  while (std::getline(stream, name, ';'))
    if (!trim(name).empty()) out.push_back(trim(name));
  return out;
}

std::shared_ptr<Kernel> Program::kernel(const std::string& name) {
  std::lock_guard<std::mutex> lock(kernels_mutex_);
  if (auto it = kernels_.find(name); it != kernels_.end()) return it->second;
  cl_int status = CL_SUCCESS;
  cl_kernel handle = clCreateKernel(program_, name.c_str(), &status);
  if (status == CL_INVALID_KERNEL_NAME) {
    std::ostringstream names;
    for (const auto& n : kernel_names()) names << (names.tellp() > 0 ? ", " : "") << n;
    KS_THROW(InvalidArgument,
             "the program has no kernel named '" << name << "'; its kernels: " << names.str());
  }
  check(status, "clCreateKernel", name);
  auto kernel = std::shared_ptr<Kernel>(new Kernel(device_, handle, name));
  kernels_.emplace(name, kernel);
  return kernel;
}

// ---- Context ----

std::shared_ptr<Context> Context::create(const std::string& selector) {
  const auto found = discover();
  const Found& chosen = select_found(found, selector);
  auto context = std::shared_ptr<Context>(new Context(chosen.info, chosen.device));
  return context;
}

std::shared_ptr<Context> Context::create(const DeviceInfo& device) {
  return create(std::to_string(device.platform_index) + ":" + std::to_string(device.device_index));
}

Context::Context(DeviceInfo info, cl_device_id device) : info_(std::move(info)), device_(device) {
  cl_int status = CL_SUCCESS;
  context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &status);
  check(status, "clCreateContext", info_.describe());
  if (platform_version_number(info_.platform_version) >= 20) {
    const cl_queue_properties properties[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    queue_ = clCreateCommandQueueWithProperties(context_, device_, properties, &status);
  } else {
    queue_ = clCreateCommandQueue(context_, device_, CL_QUEUE_PROFILING_ENABLE, &status);
  }
  if (status != CL_SUCCESS) {
    clReleaseContext(context_);
    check(status, "clCreateCommandQueue", info_.describe());
  }
  logger()->debug("OpenCL context on {}", info_.describe());
}

Context::~Context() {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    cache_.clear();
  }
  recorded_.clear();
  if (queue_ != nullptr) {
    clFinish(queue_);
    clReleaseCommandQueue(queue_);
  }
  if (context_ != nullptr) clReleaseContext(context_);
}

namespace {

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

bool read_file(const std::string& path, std::string& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  out.clear();
  char chunk[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) out.append(chunk, n);
  const bool ok = std::ferror(f) == 0;
  std::fclose(f);
  return ok;
}

// Written to a temporary name, then renamed: readers never see half a file.
bool write_file_atomic(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

std::string Context::cache_key_text(const std::string& source, const std::string& options) const {
  return "device=" + info_.describe() + "\ndriver=" + info_.driver_version + "\noptions=" + options + "\n" +
         source;
}

std::shared_ptr<Program> Context::load_binary(const std::string& key_text, const std::string& options) {
  const char* dir = std::getenv("KERNELSMITH_OCL_CACHE");
  if (dir == nullptr || *dir == '\0') return nullptr;
  const std::string base = std::string(dir) + "/" + hex64(fnv1a(key_text));
  std::string stored_key;
  std::string binary;
  // the full key text, not the hash, decides: no collision can substitute a build
  if (!read_file(base + ".key", stored_key) || stored_key != key_text || !read_file(base + ".bin", binary) ||
      binary.empty()) {
    return nullptr;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(binary.data());
  const std::size_t size = binary.size();
  cl_int binary_status = CL_SUCCESS;
  cl_int status = CL_SUCCESS;
  cl_program program =
      clCreateProgramWithBinary(context_, 1, &device_, &size, &bytes, &binary_status, &status);
  if (status != CL_SUCCESS || binary_status != CL_SUCCESS) {
    if (program != nullptr) clReleaseProgram(program);
    return nullptr;
  }
  const auto start = std::chrono::steady_clock::now();
  if (clBuildProgram(program, 1, &device_, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
    clReleaseProgram(program);
    return nullptr;  // a stale or foreign binary: build from source instead
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::shared_ptr<Program>(new Program(device_, program, options, "", seconds));
}

std::shared_ptr<Program> Context::build(const std::string& source, const std::string& options) {
  const auto key = std::make_tuple(fnv1a(source), info_.global_index, options);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(key); it != cache_.end() && it->second.source == source) {
      ++hits_;
      return it->second.program;
    }
  }
  const std::string key_text = cache_key_text(source, options);
  auto built = load_binary(key_text, options);
  if (built != nullptr) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    ++binary_hits_;
    cache_[key] = CacheEntry{source, built};
    return built;
  }
  built = build_from_source(source, options);
  if (const char* requests = std::getenv("KERNELSMITH_OCL_CACHE_REQUESTS");
      requests != nullptr && *requests != '\0') {
    // best effort: a request that cannot be written only costs a later rebuild
    write_file_atomic(std::string(requests) + "/" + hex64(fnv1a(key_text)) + ".key", key_text);
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_[key] = CacheEntry{source, built};
  return built;
}

std::string Context::store_binary(const std::string& source, const std::string& options,
                                  const std::string& dir) {
  auto built = build_from_source(source, options);
  std::size_t size = 0;
  check(clGetProgramInfo(built->program_, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr),
        "clGetProgramInfo(CL_PROGRAM_BINARY_SIZES)");
  std::string binary(size, '\0');
  unsigned char* out = reinterpret_cast<unsigned char*>(binary.data());
  check(clGetProgramInfo(built->program_, CL_PROGRAM_BINARIES, sizeof(out), &out, nullptr),
        "clGetProgramInfo(CL_PROGRAM_BINARIES)");
  const std::string key_text = cache_key_text(source, options);
  const std::string base = dir + "/" + hex64(fnv1a(key_text));
  // the binary first: a .key without its .bin is never read as a hit
  if (size == 0 || !write_file_atomic(base + ".bin", binary) || !write_file_atomic(base + ".key", key_text)) {
    KS_THROW(Error, "cannot write the OpenCL binary cache entry " + base);
  }
  return hex64(fnv1a(key_text));
}

std::shared_ptr<Program> Context::build_from_source(const std::string& source, const std::string& options) {
  // Built outside the lock: builds are slow and two different programs may
  // build at once. Two threads building the same one both build; one wins.
  const char* text = source.c_str();
  const std::size_t length = source.size();
  cl_int status = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context_, 1, &text, &length, &status);
  check(status, "clCreateProgramWithSource");
  const auto start = std::chrono::steady_clock::now();
  const cl_int build_status = clBuildProgram(program, 1, &device_, options.c_str(), nullptr, nullptr);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string log;
  std::size_t log_size = 0;
  if (clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size) == CL_SUCCESS &&
      log_size > 0) {
    log.assign(log_size, '\0');
    clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, log_size, log.data(), nullptr);
    log = clean_build_log(trim(std::string(log.c_str())));
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    ++misses_;
  }
  if (build_status != CL_SUCCESS) {
    clReleaseProgram(program);
    std::ostringstream detail;
    detail << "build failed on " << info_.name;
    if (!options.empty()) detail << " with options '" << options << "'";
    detail << "\n--- build log ---\n" << (log.empty() ? std::string("(empty)") : log);
    check(build_status, "clBuildProgram", detail.str());
  }
  return std::shared_ptr<Program>(new Program(device_, program, options, log, seconds));
}

CacheStats Context::cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return CacheStats{hits_, misses_, cache_.size(), binary_hits_};
}

void Context::clear_cache() {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.clear();
}

bool Context::host_zero_copy() const { return info_.type == "cpu" || info_.host_unified_memory; }

std::shared_ptr<Buffer> Context::allocate(std::size_t bytes) {
  KS_REQUIRE(bytes > 0, "a buffer needs a size > 0 bytes");
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &status);
  check(status, "clCreateBuffer", std::to_string(bytes) + " bytes");
  return std::shared_ptr<Buffer>(new Buffer(shared_from_this(), mem, bytes, nullptr));
}

std::shared_ptr<Buffer> Context::wrap_host(void* host, std::size_t bytes) {
  KS_REQUIRE(host != nullptr && bytes > 0, "wrap_host needs non-null memory of > 0 bytes");
  KS_REQUIRE(host_zero_copy(),
             "wrap_host: device " << info_.name << " does not share host memory; use allocate + write");
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &status);
  check(status, "clCreateBuffer(CL_MEM_USE_HOST_PTR)", std::to_string(bytes) + " bytes");
  return std::shared_ptr<Buffer>(new Buffer(shared_from_this(), mem, bytes, host));
}

std::shared_ptr<Event> Context::launch(Kernel& kernel, const std::vector<KernelArg>& args,
                                       const std::vector<std::size_t>& global,
                                       const std::vector<std::size_t>& local,
                                       const std::vector<std::size_t>& offset) {
  KS_REQUIRE(global.size() >= 1 && global.size() <= 3,
             "global size of kernel '" << kernel.name() << "' must have 1-3 dimensions, got "
                                       << global.size());
  KS_REQUIRE(local.empty() || local.size() == global.size(),
             "local size of kernel '" << kernel.name() << "' must have " << global.size()
                                      << " dimensions like the global size, got " << local.size());
  KS_REQUIRE(offset.empty() || offset.size() == global.size(),
             "offset of kernel '" << kernel.name() << "' must have " << global.size()
                                  << " dimensions like the global size, got " << offset.size());
  KS_REQUIRE(args.size() == kernel.num_args(), "kernel '" << kernel.name() << "' takes " << kernel.num_args()
                                                          << " arguments, got " << args.size());
  for (std::size_t d = 0; d < global.size(); ++d) {
    KS_REQUIRE(global[d] > 0, "global size of kernel '" << kernel.name() << "' is 0 in dimension " << d);
  }
  cl_event event = nullptr;
  {
    std::lock_guard<std::mutex> lock(kernel.launch_mutex_);
    for (std::size_t i = 0; i < args.size(); ++i) {
      const KernelArg& arg = args[i];
      cl_int status = CL_SUCCESS;
      switch (arg.kind) {
        case KernelArg::Kind::kBuffer:
          status = clSetKernelArg(kernel.kernel_, static_cast<cl_uint>(i), sizeof(cl_mem), &arg.mem);
          break;
        case KernelArg::Kind::kScalar:
          status =
              clSetKernelArg(kernel.kernel_, static_cast<cl_uint>(i), arg.bytes.size(), arg.bytes.data());
          break;
        case KernelArg::Kind::kLocal:
          status = clSetKernelArg(kernel.kernel_, static_cast<cl_uint>(i), arg.local_bytes, nullptr);
          break;
      }
      if (status != CL_SUCCESS) {
        std::ostringstream detail;
        detail << "kernel '" << kernel.name() << "' argument " << i << " ("
               << (arg.kind == KernelArg::Kind::kBuffer   ? "buffer"
                   : arg.kind == KernelArg::Kind::kScalar ? std::to_string(arg.bytes.size()) + "-byte scalar"
                                                          : "local memory")
               << ")";
        check(status, "clSetKernelArg", detail.str());
      }
    }
    const cl_int status = clEnqueueNDRangeKernel(queue_, kernel.kernel_, static_cast<cl_uint>(global.size()),
                                                 offset.empty() ? nullptr : offset.data(), global.data(),
                                                 local.empty() ? nullptr : local.data(), 0, nullptr, &event);
    if (status != CL_SUCCESS) {
      std::ostringstream detail;
      auto dims = [](const std::vector<std::size_t>& v) {
        std::ostringstream out;
        out << "(";
        for (std::size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
        out << ")";
        return out.str();
      };
      detail << "kernel '" << kernel.name() << "' global " << dims(global) << " local "
             << (local.empty() ? std::string("(auto)") : dims(local));
      if (status == CL_INVALID_WORK_GROUP_SIZE || status == CL_INVALID_WORK_ITEM_SIZE) {
        detail << "; kernel max work-group size " << kernel.max_work_group_size() << ", device max "
               << info_.max_work_group_size << "; in OpenCL 1.2 each global size must be a multiple of "
               << "the local size";
      }
      check(status, "clEnqueueNDRangeKernel", detail.str());
    }
  }
  launch_log().add(kernel.name());
  auto recorded = std::make_shared<Event>(event, kernel.name(), "kernel");
  record(recorded);
  return recorded;
}

void Context::finish() { check(clFinish(queue_), "clFinish"); }

std::size_t Context::begin_recording() {
  std::lock_guard<std::mutex> lock(record_mutex_);
  ++recording_depth_;
  return recorded_.size();
}

std::vector<std::shared_ptr<Event>> Context::end_recording(std::size_t mark) {
  std::vector<std::shared_ptr<Event>> out;
  {
    std::lock_guard<std::mutex> lock(record_mutex_);
    KS_REQUIRE(recording_depth_ > 0, "end_recording without begin_recording");
    if (mark < recorded_.size())
      out.assign(recorded_.begin() + static_cast<std::ptrdiff_t>(mark), recorded_.end());
    if (--recording_depth_ == 0) recorded_.clear();
  }
  for (const auto& event : out) event->wait();
  return out;
}

void Context::record(const std::shared_ptr<Event>& event) {
  std::lock_guard<std::mutex> lock(record_mutex_);
  if (recording_depth_ > 0) recorded_.push_back(event);
}

}  // namespace kernelsmith::opencl
