#include "base/file_read.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace rotor {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("rotor_file_read_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(ReadInputFile, ReadsARegularFile) {
  const std::string path = TempPath("ok");
  std::ofstream(path, std::ios::binary) << std::string("hello\0world", 11);
  Result<std::string> r = ReadInputFile(path);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, std::string("hello\0world", 11));
  std::filesystem::remove(path);
}

TEST(ReadInputFile, EmptyFileIsEmpty) {
  const std::string path = TempPath("empty");
  std::ofstream(path, std::ios::binary).flush();
  Result<std::string> r = ReadInputFile(path);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "");
  std::filesystem::remove(path);
}

TEST(ReadInputFile, MissingFileNamesThePath) {
  Result<std::string> r = ReadInputFile("/nonexistent-dir/prompt.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("/nonexistent-dir/prompt.txt"), std::string::npos) << r.message();
}

TEST(ReadInputFile, DeviceIsRefusedBeforeReading) {
  Result<std::string> r = ReadInputFile("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("not a regular file"), std::string::npos) << r.message();
}

TEST(ReadInputFile, DirectoryIsRefused) {
  Result<std::string> r = ReadInputFile(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("is a directory"), std::string::npos) << r.message();
}

TEST(ReadInputFile, FifoIsRefusedWithoutBlocking) {
  const std::string path = TempPath("fifo");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  Result<std::string> r = ReadInputFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("not a regular file"), std::string::npos) << r.message();
  std::filesystem::remove(path);
}

TEST(ReadInputFile, LargerThanTheBoundIsRefused) {
  const std::string path = TempPath("big");
  std::ofstream(path, std::ios::binary) << std::string(1001, 'x');
  Result<std::string> r = ReadInputFile(path, 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("1001 bytes"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("1000"), std::string::npos) << r.message();
  Result<std::string> exact = ReadInputFile(path, 1001);
  ASSERT_TRUE(exact.ok()) << exact.message();
  EXPECT_EQ(exact->size(), 1001u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace rotor
