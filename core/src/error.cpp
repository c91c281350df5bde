#include "dashattn/error.h"

namespace dashattn {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kBackendUnavailable: return "backend_unavailable";
    case ErrorCode::kIo: return "io_error";
    case ErrorCode::kOutOfMemory: return "out_of_memory";
    case ErrorCode::kInternal: return "internal_error";
  }
  return "unknown";
}

InvalidArgument::InvalidArgument(const std::string& argument, const std::string& expected, const std::string& got)
    : Error(ErrorCode::kInvalidArgument, argument,
            "invalid argument '" + argument + "': expected " + expected + ", got " + got) {}

Unsupported::Unsupported(const std::string& backend, const std::string& argument, const std::string& what)
    : Error(ErrorCode::kUnsupported, argument,
            "backend '" + backend + "' does not support " + (argument.empty() ? "" : "'" + argument + "': ") + what) {}

BackendUnavailable::BackendUnavailable(const std::string& backend, const std::string& reason)
    : Error(ErrorCode::kBackendUnavailable, backend, "backend '" + backend + "' is unavailable: " + reason) {}

IoError::IoError(const std::string& file, const std::string& what)
    : Error(ErrorCode::kIo, file, file + ": " + what) {}

InternalError::InternalError(const std::string& where, const std::string& what)
    : Error(ErrorCode::kInternal, where, "internal error in " + where + ": " + what) {}

}  // namespace dashattn
