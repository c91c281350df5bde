// Typed errors of libdashattn.
//
// Every public entry point validates its arguments on the host before any kernel launches and throws one of
// these. The message always names the offending argument and what was expected, so a user can fix the call
// without reading library code.
#pragma once

#include <stdexcept>
#include <string>

namespace dashattn {

enum class ErrorCode {
  kInvalidArgument,     // a shape, dtype, stride or parameter value the contract does not allow
  kUnsupported,         // valid per the contract, but the chosen backend cannot run it (e.g. head dim 96 on CUDA)
  kBackendUnavailable,  // backend unknown, not compiled in, or no device present
  kIo,                  // tensor file missing, malformed or inconsistent
  kOutOfMemory,         // an allocation the convenience API makes failed
  kInternal,            // a runtime failure inside a backend (a CUDA error, for example)
};

const char* error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string argument, const std::string& message)
      : std::runtime_error(message), code_(code), argument_(std::move(argument)) {}
  ErrorCode code() const noexcept { return code_; }
  // The argument (or file, or backend) the error is about; empty when it concerns no single argument.
  const std::string& argument() const noexcept { return argument_; }

 private:
  ErrorCode code_;
  std::string argument_;
};

// "invalid argument 'q': expected rank 4 [b, n, h, d], got rank 3"
class InvalidArgument : public Error {
 public:
  InvalidArgument(const std::string& argument, const std::string& expected, const std::string& got);
};

class Unsupported : public Error {
 public:
  Unsupported(const std::string& backend, const std::string& argument, const std::string& what);
};

class BackendUnavailable : public Error {
 public:
  BackendUnavailable(const std::string& backend, const std::string& reason);
};

class IoError : public Error {
 public:
  IoError(const std::string& file, const std::string& what);
};

class InternalError : public Error {
 public:
  InternalError(const std::string& where, const std::string& what);
};

}  // namespace dashattn
