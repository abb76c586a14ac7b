// The server's request bodies (server/api.h ParseRequest) on arbitrary bytes,
// for both endpoints: any JSON, any field, any type. Besides no crash: a
// refusal is a 4xx with a message, and its error body serialises; an accepted
// request respects the limits the parser promises.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/engine.h"
#include "server/api.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "request: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const rotor::GenerateOptions defaults;
  for (auto endpoint : {rotor::serve::Endpoint::kCompletions, rotor::serve::Endpoint::kChat}) {
    rotor::serve::ApiRequest request;
    auto error = rotor::serve::ParseRequest(body, endpoint, defaults, &request);
    if (error) {
      Check(error->status >= 400 && error->status < 500, "a refusal that is not a 4xx");
      Check(!error->message.empty(), "a refusal without a message");
      Check(!rotor::serve::Dump(rotor::serve::ErrorBody(*error)).empty(), "an empty error body");
      continue;
    }
    Check(request.options.n_predict <= rotor::serve::kMaxTokensLimit, "max_tokens past the limit");
    if (endpoint == rotor::serve::Endpoint::kChat)
      Check(!request.messages.empty(), "a chat request without messages");
  }
  return 0;
}
