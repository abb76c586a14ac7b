// Status and Result<T>: errors a user or a file can cause travel as values.
// Invariants (programming errors) use CHECK from check.h instead.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace rotor {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return !error_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where the error happened: "gguf: " + msg.
  Status WithContext(const std::string& where) const {
    return ok() ? *this : Error(where + ": " + message_);
  }

 private:
  Status(std::string message, bool error) : message_(std::move(message)), error_(error) {}
  std::string message_;
  bool error_ = false;
};

// Formats an error Status: Errorf("gguf: tensor '{}' offset {} past end", name, off).
template <typename... Args>
Status Errorf(fmt::format_string<Args...> f, Args&&... args) {
  return Status::Error(fmt::format(f, std::forward<Args>(args)...));
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status::Error("internal: Result built from an ok Status");
  }

  bool ok() const { return v_.index() == 0; }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  const std::string& message() const {
    static const std::string kEmpty;
    return ok() ? kEmpty : std::get<Status>(v_).message();
  }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

namespace internal {
inline Status ToStatus(const Status& s) { return s; }
template <typename T>
Status ToStatus(const Result<T>& r) { return r.status(); }
}  // namespace internal

}  // namespace rotor

#define ROTOR_CONCAT_INNER(a, b) a##b
#define ROTOR_CONCAT(a, b) ROTOR_CONCAT_INNER(a, b)

// Returns the error of a Status or Result expression from the enclosing function.
#define RETURN_IF_ERROR(expr)                                          \
  do {                                                                 \
    auto&& rotor_status_ = (expr);                                     \
    if (!rotor_status_.ok()) return ::rotor::internal::ToStatus(rotor_status_); \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()); declares x from the Result's value or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(ROTOR_CONCAT(rotor_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
