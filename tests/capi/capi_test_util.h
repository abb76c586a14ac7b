// Helpers shared by the C API tests.
#pragma once

#include <string>

#include "rotor/rotor.h"

namespace rotor_capi_test {

// Owns a status; empty when the call succeeded.
struct St {
  rotor_status* s;
  St(rotor_status* s) : s(s) {}  // NOLINT
  ~St() { rotor_status_free(s); }
  St(const St&) = delete;
  St& operator=(const St&) = delete;
  bool ok() const { return s == nullptr; }
  rotor_code code() const { return rotor_status_code(s); }
  std::string msg() const { return rotor_status_message(s); }
};

}  // namespace rotor_capi_test
