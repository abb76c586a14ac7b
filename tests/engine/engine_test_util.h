// Shared by the engine tests: an Engine over the bundled stories260K model.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "engine/engine.h"

namespace rotor::testing {

// 2 threads; n_ctx 0 = the model's context. A failure fails the test.
inline std::unique_ptr<Engine> MakeStoriesEngine(int n_ctx = 0) {
  EngineOptions o;
  o.model_path = ROTOR_MODELS_DIR "/stories260K.gguf";
  o.n_threads = 2;
  o.n_ctx = n_ctx;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

}  // namespace rotor::testing
