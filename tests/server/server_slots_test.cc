// The slot API (POST /slots/{id}?action=save|restore|erase, llama-server's
// shapes) with --slot-save-path: a slot saved after a request, erased (the
// same request then computes its prompt again), restored (in this server and
// in a fresh one: the request then takes its prompt from the cache and gives
// the same text); bad ids, actions and file names (nothing outside the
// directory), missing and corrupt files refused; 501 without the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {
namespace server_slots_test {

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with "
    "her red ball. One day she saw a big dog under a tree, and the dog wanted to play too. ";

struct SlotDir {
  SlotDir()
      : path(std::filesystem::temp_directory_path() /
             ("rotor_slots_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~SlotDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

ServeOptions SlotOptions(const std::string& dir) {
  ServeOptions o = TestOptions(2, 4);
  o.slot_save_path = dir;
  return o;
}

json Post(TestServer& server, const std::string& path, const std::string& body, int* status) {
  auto res = server.Client()->Post(path, body, "application/json");
  if (!res) {
    ADD_FAILURE() << "POST " << path << " failed: " << httplib::to_string(res.error());
    *status = 0;
    return json();
  }
  *status = res->status;
  return json::parse(res->body, nullptr, false);
}

const json kRequest = {{"prompt", kStory}, {"max_tokens", 16}, {"temperature", 0}};

int64_t Cached(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"]; }

TEST(ServerSlots, SaveEraseRestoreAndRestoreInAnotherServer) {
  SlotDir dir;
  TestServer server(SlotOptions(dir.path.string()));
  ASSERT_TRUE(server.ok()) << server.error();
  int status = 0;
  const json first = Post(server, "/v1/completions", kRequest.dump(), &status);
  ASSERT_EQ(status, 200) << first.dump();
  const int64_t n_prompt = first["usage"]["prompt_tokens"];
  const int64_t n_text = n_prompt + first["usage"]["completion_tokens"].get<int64_t>();

  // One request at a time holds slot 0: its prompt and reply are the slot's text.
  const json saved =
      Post(server, "/slots/0?action=save", json{{"filename", "story.bin"}}.dump(), &status);
  ASSERT_EQ(status, 200) << saved.dump();
  EXPECT_EQ(saved["id_slot"], 0);
  EXPECT_EQ(saved["filename"], "story.bin");
  EXPECT_EQ(saved["n_saved"], n_text / 16 * 16);
  EXPECT_EQ(saved["n_written"], std::filesystem::file_size(dir.path / "story.bin"));
  EXPECT_TRUE(saved["timings"]["save_ms"].is_number());

  const json erased = Post(server, "/slots/0?action=erase", "", &status);
  ASSERT_EQ(status, 200) << erased.dump();
  EXPECT_EQ(erased, json({{"id_slot", 0}, {"n_erased", n_text}}));
  json again = Post(server, "/v1/completions", kRequest.dump(), &status);
  ASSERT_EQ(status, 200) << again.dump();
  EXPECT_EQ(Cached(again), 0);  // its blocks went with the erase
  Post(server, "/slots/0?action=erase", "", &status);

  const json restored =
      Post(server, "/slots/1?action=restore", json{{"filename", "story.bin"}}.dump(), &status);
  ASSERT_EQ(status, 200) << restored.dump();
  EXPECT_EQ(restored["id_slot"], 1);
  EXPECT_EQ(restored["n_restored"], saved["n_saved"]);
  EXPECT_EQ(restored["n_read"], saved["n_written"]);
  EXPECT_TRUE(restored["timings"]["restore_ms"].is_number());
  again = Post(server, "/v1/completions", kRequest.dump(), &status);
  ASSERT_EQ(status, 200) << again.dump();
  EXPECT_EQ(Cached(again), (n_prompt - 1) / 16 * 16);
  EXPECT_EQ(again["choices"][0]["text"], first["choices"][0]["text"]);

  // Another server (another process, as far as the pool goes) restores it.
  TestServer fresh(SlotOptions(dir.path.string()));
  ASSERT_TRUE(fresh.ok()) << fresh.error();
  Post(fresh, "/slots/0?action=restore", json{{"filename", "story.bin"}}.dump(), &status);
  ASSERT_EQ(status, 200);
  const json other = Post(fresh, "/v1/completions", kRequest.dump(), &status);
  ASSERT_EQ(status, 200) << other.dump();
  EXPECT_GT(Cached(other), 0);
  EXPECT_EQ(other["choices"][0]["text"], first["choices"][0]["text"]);
  // The engine thread publishes its figures after the step that ended the request.
  EXPECT_TRUE(WaitFor([&] { return ScrapeMetrics(fresh.port())["rotor_kv_blocks_used"] == 0; }));
}

TEST(ServerSlots, BadIdsActionsAndFileNamesAreRefused) {
  SlotDir dir;
  TestServer server(SlotOptions(dir.path.string()));
  ASSERT_TRUE(server.ok()) << server.error();
  auto expect = [&](const std::string& path, const std::string& body, int want,
                    const std::string& says) {
    int status = 0;
    const json r = Post(server, path, body, &status);
    EXPECT_EQ(status, want) << path << " " << body << ": " << r.dump();
    const std::string message = r["error"]["message"].is_string() ? r["error"]["message"] : "";
    EXPECT_NE(message.find(says), std::string::npos) << path << " " << body << ": " << r.dump();
  };
  const std::string name = json{{"filename", "x.bin"}}.dump();
  expect("/slots/2?action=save", name, 400, "slot id '2' is not one of 0..1");
  expect("/slots/x?action=save", name, 400, "slot id 'x'");
  expect("/slots/-1?action=save", name, 400, "slot id '-1'");
  expect("/slots/?action=save", name, 400, "slot id ''");
  expect("/slots/0?action=bogus", name, 400, "action 'bogus' is not one of save, restore, erase");
  expect("/slots/0", name, 400, "action ''");
  for (const char* bad : {"../x", "/etc/passwd", "a/b", "..", ".", "a\\b"})
    expect("/slots/0?action=save", json{{"filename", bad}}.dump(), 400,
           std::string("filename '") + bad + "'");
  expect("/slots/0?action=save", json{{"filename", ""}}.dump(), 400, "the filename is empty");
  expect("/slots/0?action=save", json{{"filename", std::string("a\0b", 3)}}.dump(), 400,
         "control characters");
  expect("/slots/0?action=save", "{}", 400, "\"filename\" (a string) is required");
  expect("/slots/0?action=save", json{{"filename", 7}}.dump(), 400, "\"filename\"");
  expect("/slots/0?action=restore", "not json", 400, "not valid JSON: parse error at line 1");
  expect("/slots/0?action=restore", "[1]", 400, "must be a JSON object");
  EXPECT_FALSE(std::filesystem::exists(dir.path.parent_path() / "x"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path));

  expect("/slots/0?action=restore", json{{"filename", "none.bin"}}.dump(), 404,
         "no file 'none.bin'");
  std::ofstream(dir.path / "junk.bin", std::ios::binary) << std::string(100, 'x');
  expect("/slots/0?action=restore", json{{"filename", "junk.bin"}}.dump(), 400,
         "not a rotor KV file");
  // A saved file with one byte flipped near its end: the checksum.
  int status = 0;
  Post(server, "/v1/completions", kRequest.dump(), &status);
  ASSERT_EQ(status, 200);
  Post(server, "/slots/0?action=save", json{{"filename", "good.bin"}}.dump(), &status);
  ASSERT_EQ(status, 200);
  std::string bytes;
  {
    std::ifstream in(dir.path / "good.bin", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 12] ^= 1;
  std::ofstream(dir.path / "bad.bin", std::ios::binary) << bytes;
  expect("/slots/0?action=restore", json{{"filename", "bad.bin"}}.dump(), 400, "checksum");
}

TEST(ServerSlots, WithoutASlotSavePathSlotActionsAreNotSupported) {
  TestServer server(TestOptions(2, 4));
  ASSERT_TRUE(server.ok()) << server.error();
  int status = 0;
  const json r = Post(server, "/slots/0?action=save", json{{"filename", "x.bin"}}.dump(), &status);
  EXPECT_EQ(status, 501) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("--slot-save-path"), std::string::npos)
      << r.dump();
}

}  // namespace server_slots_test
}  // namespace
}  // namespace rotor::serve::testing
