#include "base/status.h"

#include <gtest/gtest.h>

namespace rotor {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Errorf("half: {} is odd", x);
  return x / 2;
}

Result<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x));
  return Status::Ok();
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(Status::Ok().ok());
  Status e = Status::Error("bad");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.WithContext("gguf").message(), "gguf: bad");
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "half: 3 is odd");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).message(), "half: 5 is odd");
}

TEST(Result, OkStatusBecomesError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace rotor
