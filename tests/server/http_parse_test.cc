#include "server/http_parse.h"

#include <gtest/gtest.h>

#include <string>

namespace rotor::serve {
namespace {

HttpLimits Small() { return HttpLimits{256, 8, 64}; }

TEST(HttpParseTest, ContentLengthRequest) {
  HttpRequest r;
  size_t used = 0;
  const std::string bytes =
      "POST /v1/completions?x=1&action=save HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
      "X-Long:  v a l  \r\n\r\nhelloNEXT";
  ASSERT_EQ(ParseHttpRequest(bytes, Small(), &r, &used), 0);
  EXPECT_EQ(used, bytes.size() - 4);  // the pipelined "NEXT" is left
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.QueryParam("action"), "save");
  EXPECT_EQ(r.QueryParam("none"), "");
  EXPECT_EQ(r.body, "hello");
  ASSERT_NE(r.Header("x-long"), nullptr);
  EXPECT_EQ(*r.Header("x-long"), "v a l");
  EXPECT_TRUE(r.keep_alive);
}

// One decoder for paths and query strings: only a query's '+' is a space.
TEST(HttpParseTest, PercentDecodePathsAndQueries) {
  EXPECT_EQ(PercentDecode("a%2Fb+c%2"), "a/b+c%2");
  EXPECT_EQ(PercentDecode("a%2fb+c%zz", true), "a/b c%zz");
  EXPECT_EQ(PercentDecode("%41"), "A");
  HttpRequest r;
  size_t used = 0;
  ASSERT_EQ(
      ParseHttpRequest("GET /x?na%6De=a+b%21 HTTP/1.1\r\nHost: a\r\n\r\n", Small(), &r, &used), 0);
  EXPECT_EQ(r.QueryParam("name"), "a b!");
}

TEST(HttpParseTest, ChunkedBodyIsDecodedByteByByte) {
  const std::string bytes =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: x\r\n\r\n";
  RequestParser p(Small());
  for (size_t i = 0; i < bytes.size(); ++i) {
    ASSERT_NE(p.state(), RequestParser::State::kDone) << i;
    ASSERT_EQ(p.Feed(std::string_view(bytes).substr(i, 1)), 1u) << i;
  }
  ASSERT_EQ(p.state(), RequestParser::State::kDone) << p.error_message();
  EXPECT_EQ(p.request().body, "abc0123456789abcdef");
}

TEST(HttpParseTest, LimitsAreCheckedAsBytesArrive) {
  HttpRequest r;
  // Content-Length over the body limit: 413 before any body byte.
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", Small(), &r), 413);
  // Chunks over it: 413 at the chunk size line that passes it.
  size_t used = 0;
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "20\r\n" + std::string(32, 'a') + "\r\n21\r\n",
                             Small(), &r, &used),
            413);
  // A header line that never ends: 431 once the header passes its limit,
  // having taken at most that many bytes.
  RequestParser p(Small());
  const std::string line = "GET / HTTP/1.1\r\nX: " + std::string(1000, 'a');
  used = p.Feed(line);
  EXPECT_EQ(p.state(), RequestParser::State::kError);
  EXPECT_EQ(p.error_status(), 431);
  EXPECT_LE(used, 256u);
  // Too many fields.
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 9; ++i) many += "A: b\r\n";
  EXPECT_EQ(ParseHttpRequest(many + "\r\n", Small(), &r), 431);
}

TEST(HttpParseTest, MalformedFramingIsRefused) {
  HttpRequest r;
  const HttpLimits l = Small();
  EXPECT_EQ(ParseHttpRequest("GET /\r\n\r\n", l, &r), 400);
  EXPECT_EQ(ParseHttpRequest("GET / HTTP/2.0\r\n\r\n", l, &r), 505);
  EXPECT_EQ(ParseHttpRequest("G(T / HTTP/1.1\r\n\r\n", l, &r), 400);
  EXPECT_EQ(ParseHttpRequest("GET / HTTP/1.1\r\nNo colon\r\n\r\n", l, &r), 400);
  EXPECT_EQ(ParseHttpRequest("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", l, &r), 400);
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", l, &r), 400);
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                             l, &r),
            400);
  EXPECT_EQ(ParseHttpRequest(
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", l,
                &r),
            400);
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", l, &r), 501);
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", l,
                             &r),
            400);
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
                             l, &r),
            400);
  // Incomplete: more bytes needed.
  EXPECT_EQ(ParseHttpRequest("GET / HTTP/1.1\r\nHost: a\r\n", l, &r), -1);
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab", l, &r), -1);
}

TEST(HttpParseTest, KeepAliveAndExpect) {
  HttpRequest r;
  ASSERT_EQ(ParseHttpRequest("GET / HTTP/1.0\r\n\r\n", Small(), &r), 0);
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(ParseHttpRequest("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", Small(), &r), 0);
  EXPECT_TRUE(r.keep_alive);
  ASSERT_EQ(ParseHttpRequest("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n", Small(), &r), 0);
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(ParseHttpRequest("\r\nPOST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
                             Small(), &r),
            0);
  EXPECT_TRUE(r.expect_continue);
}

TEST(HttpParseTest, ResetParsesTheNextRequest) {
  RequestParser p(Small());
  const std::string two = "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
  const size_t used = p.Feed(two);
  ASSERT_EQ(p.state(), RequestParser::State::kDone);
  EXPECT_EQ(p.request().path, "/a");
  p.Reset();
  EXPECT_TRUE(p.empty());
  p.Feed(std::string_view(two).substr(used));
  ASSERT_EQ(p.state(), RequestParser::State::kDone);
  EXPECT_EQ(p.request().path, "/b");
}

}  // namespace
}  // namespace rotor::serve
