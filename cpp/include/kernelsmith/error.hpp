// One exception hierarchy for the whole core. Every throw records where it
// happened, so a failure that surfaces in Python still says which C++ line
// raised it (in the spirit of faiss's FaissAssert.h).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kernelsmith {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line, const char* function)
      : std::runtime_error(format(message, file, line, function)), message_(message) {}
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message) {}

  // The message without the location suffix.
  const std::string& message() const noexcept { return message_; }

 private:
  static std::string format(const std::string& message, const char* file, int line, const char* function) {
    std::ostringstream out;
    out << message << " [" << function << " at " << file << ":" << line << "]";
    return out.str();
  }
  std::string message_;
};

// A caller passed something that can never work (bad config, out-of-range
// argument). Bound to Python's ValueError.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A checkpoint or other persisted state that cannot be read back.
class CorruptState : public Error {
 public:
  using Error::Error;
};

// The OpenCL runtime reported an error; the message names the CL error code
// and the call that failed.
class OpenCLError : public Error {
 public:
  OpenCLError(const std::string& message, int code, const char* file, int line, const char* function)
      : Error(message, file, line, function), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

}  // namespace kernelsmith

#define KS_THROW(ExceptionType, streamed_message)                              \
  do {                                                                         \
    std::ostringstream ks_throw_stream_;                                       \
    ks_throw_stream_ << streamed_message;                                      \
    throw ExceptionType(ks_throw_stream_.str(), __FILE__, __LINE__, __func__); \
  } while (0)

// Argument validation: KS_REQUIRE(n > 0, "islands must be >= 1, got " << n);
#define KS_REQUIRE(condition, streamed_message)                                   \
  do {                                                                            \
    if (!(condition)) KS_THROW(::kernelsmith::InvalidArgument, streamed_message); \
  } while (0)
