// Exit codes of the dashattn tool (documented in docs/cli.md) and the mapping from library errors to them.
#pragma once

#include "dashattn/error.h"

namespace dashattn::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitVerificationFailed = 1,  // verify found a disagreement, decode differed from prefill
  kExitUsage = 2,               // unknown flag, missing or malformed value (CLI11 parse errors)
  kExitInvalidInput = 3,        // a typed library error about the inputs or parameters
  kExitBackendUnavailable = 4,
  kExitIo = 5,                  // missing, unreadable or malformed file, failed write
};

inline int exit_code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBackendUnavailable: return kExitBackendUnavailable;
    case ErrorCode::kIo: return kExitIo;
    default: return kExitInvalidInput;
  }
}

}  // namespace dashattn::cli
