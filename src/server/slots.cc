// POST /slots/{id}?action=save|restore|erase, as llama-server's slot API:
//   save     {"filename"} -> {"id_slot", "filename", "n_saved", "n_written",
//                             "timings": {"save_ms"}}
//   restore  {"filename"} -> {"id_slot", "filename", "n_restored", "n_read",
//                             "timings": {"restore_ms"}}
//   erase                 -> {"id_slot", "n_erased"}
// rotor's sequences have no fixed slots; the Batcher names them (a running
// request holds the lowest free id and a slot remembers the text of the last
// request that held it). Save writes the whole blocks of that text the prefix
// cache holds to a KV file (kv_file.h) in --slot-save-path; restore loads a
// file's whole blocks into the prefix cache, so any request whose prompt
// starts with its tokens takes them (and the slot remembers them); erase
// forgets the slot's text and drops its blocks no sequence holds. The pool
// work runs on the engine thread (Batcher::RunOnEngineThread).
#include <fmt/format.h>

#include <charconv>
#include <filesystem>

#include "server/fields.h"
#include "base/timer.h"
#include "engine/prompt_cache.h"
#include "server/server.h"

namespace rotor::serve {
namespace {

using nlohmann::json;


}  // namespace

std::string SlotFilenameError(std::string_view name) {
  if (name.empty()) return "the filename is empty";
  if (name.size() > 255)
    return fmt::format("the filename has {} bytes, more than 255", name.size());
  if (name == "." || name == "..") return fmt::format("'{}' is not a file name", name);
  for (const char c : name) {
    if (c == '/' || c == '\\')
      return "the filename must not name a directory ('/' or '\\'): files stay in --slot-save-path";
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return "the filename must not hold control characters";
  }
  return "";
}

void Server::HandleSlots(const std::shared_ptr<HttpExchange>& ex) {
  const HttpRequest& req = ex->request();
  auto fail = [&](const ApiError& e) { Respond(*ex, e); };
  if (auto e = Unavailable()) return fail(*e);
  if (options_.slot_save_path.empty())
    return fail(ApiError{501,
                         "this server does not support slot actions: start it with "
                         "--slot-save-path DIR",
                         "not_supported_error", "", "not_supported"});
  const std::string id_text = req.path.substr(std::string_view("/slots/").size());
  int id = -1;
  const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
  if (id_text.empty() || ec != std::errc() || end != id_text.data() + id_text.size() || id < 0 ||
      id >= options_.parallel)
    return fail(BadRequest(fmt::format("slot id '{}' is not one of 0..{} (--parallel)", id_text,
                                       options_.parallel - 1),
                           "id_slot"));
  const std::string action = req.QueryParam("action");
  if (action != "save" && action != "restore" && action != "erase")
    return fail(BadRequest(fmt::format("action '{}' is not one of save, restore, erase", action),
                           "action"));

  std::string filename;
  std::filesystem::path path;
  if (action != "erase") {
    std::string why;
    const json body = ParseJson(req.body, &why);
    if (body.is_discarded())
      return fail(BadRequest("the body is not valid JSON: " + why));
    if (!body.is_object())
      return fail(BadRequest("the body must be a JSON object with a \"filename\""));
    const auto it = body.find("filename");
    if (it == body.end() || !it->is_string())
      return fail(BadRequest("\"filename\" (a string) is required", "filename"));
    filename = it->get<std::string>();
    if (std::string why = SlotFilenameError(filename); !why.empty())
      return fail(BadRequest(fmt::format("filename '{}': {}", filename, why), "filename"));
    path = std::filesystem::path(options_.slot_save_path) / filename;
    if (action == "restore" && !std::filesystem::exists(path))
      return fail(ApiError{404, fmt::format("no file '{}' in --slot-save-path", filename),
                           "invalid_request_error", "filename", "not_found"});
  }

  // On the engine thread: the slot's text and the engine's KV pool.
  json out;
  auto act = [&]() -> Status {
    Batcher::Slot& slot = batcher_->slots()[id];
    if (action == "save") {
      ASSIGN_OR_RETURN(PromptCacheFile r,
                       SavePromptCache(*engine_, path.string(), slot.kv, slot.tokens));
      out = {
          {"id_slot", id}, {"filename", filename}, {"n_saved", r.n_tokens}, {"n_written", r.bytes}};
    } else if (action == "restore") {
      ASSIGN_OR_RETURN(KvConfig kv, PromptCacheConfig(*engine_, path.string()));
      ASSIGN_OR_RETURN(PromptCacheFile r,
                       LoadPromptCache(*engine_, path.string(), kv, std::nullopt));
      slot.tokens = std::move(r.tokens);
      slot.kv = kv;
      out = {
          {"id_slot", id}, {"filename", filename}, {"n_restored", r.n_cached}, {"n_read", r.bytes}};
    } else {
      DropPromptCache(*engine_, slot.kv, slot.tokens);
      out = {{"id_slot", id}, {"n_erased", slot.tokens.size()}};
      slot.tokens.clear();
    }
    return Status::Ok();
  };
  Status status;
  const int64_t start = NowNs();
  if (!batcher_->RunOnEngineThread([&] { status = act(); }))
    return fail(ApiError{503, "the server is shutting down", "server_error", "", ""});
  if (!status.ok()) {
    // A file that cannot be restored is the request's; one that cannot be written, the server's.
    if (action == "restore") return fail(BadRequest(status.message(), "filename"));
    return fail(ApiError{500, status.message(), "server_error", "", ""});
  }
  if (action != "erase")
    out["timings"] = {{action == "save" ? "save_ms" : "restore_ms", (NowNs() - start) / 1e6}};
  ex->Respond(HttpResponse{200, kJson, Dump(out), {}});
  metrics_.CountRequest(req.path, 200);
}

}  // namespace rotor::serve
