// Internal entry points of the attention module.
#pragma once

#include "attention/attention.h"
#include "attention/fold.h"

namespace rotor {

// h2o: per kv head, token by token; updates the plan's lane state.
void AttendH2o(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan, AttentionScratch& scratch,
               bool avx512);

}  // namespace rotor
