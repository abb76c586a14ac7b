// The chat page's files as compiled into the binary: the same bytes as web/,
// each with its content type, and "/" naming the page.
#include "server/web.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace rotor::serve {
namespace {

std::string ReadSource(std::string_view path) {
  std::ifstream in(std::string(ROTOR_MODELS_DIR) + "/../web" + std::string(path), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ServeWebTest, EmbeddedFilesAreTheSourceFiles) {
  ASSERT_GE(StaticFiles().size(), 3u);
  std::set<std::string_view> paths;
  for (const StaticFile& f : StaticFiles()) {
    EXPECT_TRUE(paths.insert(f.path).second) << "twice: " << f.path;
    ASSERT_TRUE(f.path.starts_with("/")) << f.path;
    const std::string source = ReadSource(f.path);
    ASSERT_FALSE(source.empty()) << "web" << f.path << " is missing or empty";
    EXPECT_EQ(f.body, source) << f.path << " differs from web" << f.path;
    EXPECT_EQ(f.body.data()[f.body.size()], '\0');  // a terminator past the bytes
  }
}

TEST(ServeWebTest, ContentTypes) {
  const StaticFile* page = FindStaticFile("/index.html");
  ASSERT_NE(page, nullptr);
  EXPECT_EQ(page->content_type, "text/html; charset=utf-8");
  const StaticFile* js = FindStaticFile("/chat.js");
  ASSERT_NE(js, nullptr);
  EXPECT_EQ(js->content_type, "text/javascript; charset=utf-8");
  const StaticFile* css = FindStaticFile("/chat.css");
  ASSERT_NE(css, nullptr);
  EXPECT_EQ(css->content_type, "text/css; charset=utf-8");
}

TEST(ServeWebTest, RootIsThePageAndUnknownPathsAreNot) {
  EXPECT_EQ(FindStaticFile("/"), FindStaticFile("/index.html"));
  EXPECT_NE(FindStaticFile("/")->body.find("<title>rotor chat</title>"), std::string_view::npos);
  EXPECT_EQ(FindStaticFile(""), nullptr);
  EXPECT_EQ(FindStaticFile("index.html"), nullptr);
  EXPECT_EQ(FindStaticFile("/index.htm"), nullptr);
  EXPECT_EQ(FindStaticFile("/../web/index.html"), nullptr);
  EXPECT_EQ(FindStaticFile("/v1/models"), nullptr);
}

// The page only asks the server for what it serves (no network fetches).
TEST(ServeWebTest, PageLoadsNothingFromElsewhere) {
  for (const StaticFile& f : StaticFiles()) {
    EXPECT_EQ(f.body.find("http://"), std::string_view::npos) << f.path;
    EXPECT_EQ(f.body.find("https://"), std::string_view::npos) << f.path;
    EXPECT_EQ(f.body.find("//cdn"), std::string_view::npos) << f.path;
  }
}

}  // namespace
}  // namespace rotor::serve
